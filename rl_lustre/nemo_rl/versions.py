"""What differs between NeMo-RL versions, as data.

Recipes ship for :data:`RECIPE_VERSION` only. For another version the recipe keys are
those of :data:`RECIPE_VERSION` with every known key rename applied, and the checks say
so in a warning rather than pretend to know that version's recipes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..spec import ClusterSpec, JobSpec

RECIPE_VERSION = "0.4.0"
DEFAULT_VERSION = "0.4.0"


def _version_tuple(version: str) -> tuple[int, ...]:
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ConfigError("NeMo-RL", "version", version, "must be a version like '0.4.0'")
    return tuple(map(int, version.split(".")))


@attrs.frozen
class KeyRename:
    """A config key that moved: ``old`` is ``new`` from version ``since`` on."""

    old: str
    new: str
    since: str


# Source: NeMo-RL release notes; v0.6.0 moved the dataset settings under data.train.
KEY_RENAMES: tuple[KeyRename, ...] = (KeyRename("data.dataset_name", "data.train.dataset_name", since="0.6.0"),)


@attrs.frozen
class NemoRLVersion:
    """One NeMo-RL release and the facts rl_lustre relies on.

    Examples:
        >>> v = nemo_rl_version("0.6.0")
        >>> v.key("data.dataset_name")
        'data.train.dataset_name'
        >>> nemo_rl_version("0.4.0").ray_version
        '2.46.0'

    Attributes:
        version: ``"0.4.0"``.
        ray_version: the Ray it pins, when known.
        python_version: the Python it pins, when known.
        renames: the key renames in effect at this version (old → new).
    """

    version: str
    ray_version: str | None = None
    python_version: str | None = None
    renames: tuple[KeyRename, ...] = ()

    @property
    def entry_script(self) -> str:
        """The GRPO entry script of this version, relative to the NeMo-RL checkout.

        Examples:
            >>> nemo_rl_version("0.4.0").entry_script, nemo_rl_version("0.6.0").entry_script
            ('examples/run_grpo_math.py', 'examples/run_grpo.py')
        """
        vt = _version_tuple(self.version)
        return [script for since, script in ENTRY_SCRIPTS if vt >= _version_tuple(since)][-1]

    @property
    def has_recipes(self) -> bool:
        """Whether rl_lustre ships this version's recipe files."""
        return self.version == RECIPE_VERSION

    def key(self, key: str) -> str:
        """``key`` (as spelled at :data:`RECIPE_VERSION`) as this version spells it."""
        for r in self.renames:
            if key == r.old or key.startswith(r.old + "."):
                return r.new + key[len(r.old) :]
        return key

    def renamed_from(self, key: str) -> KeyRename | None:
        """The rename that retired ``key`` at or before this version, if any."""
        for r in self.renames:
            if key == r.old or key.startswith(r.old + "."):
                return r
        return None


# NeMo-RL's GRPO entry script, by the version that introduced it. Source: the release
# tags of github.com/NVIDIA-NeMo/RL: v0.4.0 has examples/run_grpo_math.py; v0.5.0 adds
# examples/run_grpo.py next to it; v0.6.0 removes run_grpo_math.py (and moves the dataset
# settings under data.train, see KEY_RENAMES).
ENTRY_SCRIPTS: tuple[tuple[str, str], ...] = (
    ("0.0.0", "examples/run_grpo_math.py"),
    ("0.6.0", "examples/run_grpo.py"),
)


# Pins from each release's pyproject.toml / container (Ray, Python).
_PINS: dict[str, tuple[str | None, str | None]] = {
    "0.4.0": ("2.46.0", "3.12"),
}


def nemo_rl_version(version: str) -> NemoRLVersion:
    """The facts for ``version``; unknown pins are None, known renames always apply.

    Examples:
        >>> nemo_rl_version("0.4.0").python_version
        '3.12'

    Raises:
        ConfigError: ``version`` is not ``X.Y.Z``.
    """
    vt = _version_tuple(version)
    ray, python = _PINS.get(version, (None, None))
    renames = tuple(r for r in KEY_RENAMES if vt >= _version_tuple(r.since))
    return NemoRLVersion(version=version, ray_version=ray, python_version=python, renames=renames)


def version_for(job: JobSpec, cluster: ClusterSpec) -> str:
    """The NeMo-RL version a job runs: the job's, else the cluster image's, else the default.

    Examples:
        >>> from rl_lustre import Cluster, GRPOJob
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> version_for(GRPOJob(name="run-1"), c)
        '0.4.0'
    """
    from .._validate import need
    from ..spec import ClusterSpec, JobSpec

    need("version_for", "job", job, JobSpec, "a GRPOJob")
    need("version_for", "cluster", cluster, ClusterSpec, "a Cluster")
    return choose_version(job.nemo_rl_version, cluster.nemo_rl_version)


def choose_version(job_version: str | None, image_version: str | None) -> str:
    """The job's version, else the image's, else :data:`DEFAULT_VERSION`.

    Examples:
        >>> choose_version(None, "0.6.0"), choose_version(None, None)
        ('0.6.0', '0.4.0')
    """
    return job_version or image_version or DEFAULT_VERSION
