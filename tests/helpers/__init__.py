"""What the tests share: fixtures (registered as plugins by ``tests/conftest.py``), worlds the
Kubernetes and GKE tests run in, and the base specs and polling settings tests build on.

A test module imports what it needs from here (``from helpers.kube_both import wait``), never
from another test module; ``tests/test_tests_stand_alone.py`` checks that.
"""
