"""The ``rl-lustre`` console script, in-process through click's runner (one subprocess
checks the installed entry point)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from rl_lustre.cli._app import VERBS, cli
from rl_lustre.cli._errors import EXIT_CODES, exit_code
from rl_lustre.errors import (
    ConfigError,
    JobFailedError,
    NotFoundError,
    OwnershipError,
    ProvisioningInterrupted,
    RLLustreError,
    TeardownError,
)

SCRIPT = """\
import sys
from rl_lustre import Cluster

gke = Cluster(name="cli-demo", project="my-project", region="us-east1", zone="us-east1-b", num_nodes=2)
not_a_cluster = 42

if __name__ == "__main__":
    sys.exit("the __main__ block must not run when the CLI loads this file")
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "deploy.py"
    path.write_text(SCRIPT)
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_every_verb_has_help() -> None:
    code, out, _ = invoke("--help")
    assert code == 0
    for verb in VERBS:
        assert verb in out
        code, verb_help, _ = invoke(verb, "--help")
        assert code == 0, verb
        assert f"Usage: cli {verb}" in verb_help


def test_plan_shows_the_plan_of_the_cluster_in_the_file(script: Path) -> None:
    code, out, _ = invoke("plan", f"{script}:gke")
    assert code == 0
    assert "Plan for deployment 'cli-demo' on GKE" in out
    assert " gpu-pool " in out

    code, out, _ = invoke("plan", f"{script}:gke", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["cluster_name"] == "cli-demo"
    assert data["totals"]["gpus"] == 16
    assert [r["key"] for r in data["resources"]][:2] == ["network", "subnet"]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("deploy.py", "the ':name' part is missing"),
        ("missing.py:gke", "there is no file"),
        ("{script}:nope", "has no attribute 'nope' (Clusters there: gke)"),
        ("{script}:not_a_cluster", "'not_a_cluster' is a int, not a Cluster"),
        ("{script}:gke-1", "'gke-1' is not a Python name"),
        ("no_such_module_xyz:gke", "no module named 'no_such_module_xyz'"),
    ],
)
def test_a_bad_target_is_a_config_error_with_exit_code_2(script: Path, target: str, message: str) -> None:
    code, out, err = invoke("plan", target.format(script=script))
    assert code == 2
    assert out == ""
    assert err.startswith("error: rl-lustre.TARGET=")
    assert message in err


def test_a_bad_cluster_in_the_file_gives_the_librarys_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        'from rl_lustre import Cluster\nc = Cluster(name="x", project="p-1234", region="us-east1", '
        'zone="europe-west4-a")\n'
    )
    code, _, err = invoke("plan", f"{bad}:c")
    assert code == 2
    assert "error: Cluster.zone='europe-west4-a': must be a zone of region 'us-east1'" in err

    crash = tmp_path / "crash.py"
    crash.write_text("raise RuntimeError('boom')\n")
    code, _, err = invoke("plan", f"{crash}:c")
    assert code == 2
    assert "loading" in err
    assert "raised RuntimeError: boom" in err


def test_exit_codes_follow_the_error_hierarchy() -> None:
    assert exit_code(ConfigError("Cluster", "zone", "x", "bad")) == 2
    assert exit_code(OwnershipError("not ours")) == 3
    assert exit_code(NotFoundError("gone")) == 4
    assert exit_code(JobFailedError("j", "FAILED")) == 11
    assert exit_code(TeardownError(["lustre"], {}, None)) == 10  # type: ignore[arg-type]
    assert exit_code(ProvisioningInterrupted(KeyboardInterrupt(), step=None)) == 130
    assert exit_code(RLLustreError("other")) == 1
    # A subclass is never shadowed by its base class listed earlier.
    for i, (cls, _) in enumerate(EXIT_CODES):
        for base, _ in EXIT_CODES[:i]:
            assert not issubclass(cls, base), (cls, base)


def test_the_console_script_is_installed(script: Path) -> None:
    scripts = Path(sys.executable).parent
    done = subprocess.run(
        [str(scripts / "rl-lustre"), "plan", f"{script}:gke", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cluster_name"] == "cli-demo"
    done = subprocess.run(
        [str(scripts / "rl-lustre"), "plan", "nothing-here.py:x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "there is no file" in textwrap.dedent(done.stderr)


def test_ctrl_c_exits_130_with_what_the_library_says(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rl_lustre.cli import _target

    def interrupted(target: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_target, "load_target", interrupted)
    code, out, err = invoke("plan", f"{script}:gke")
    assert (code, out, err) == (130, "", "interrupted\n")

    def rolled_back(target: str) -> None:
        raise ProvisioningInterrupted(KeyboardInterrupt("SIGINT received"), step=None, cleaned=["network"])

    monkeypatch.setattr(_target, "load_target", rolled_back)
    code, _, err = invoke("up", f"{script}:gke")
    assert code == 130
    assert err.startswith("error: up() was stopped (SIGINT received)")
    assert "cleaned up: network" in err


def test_the_exit_codes_are_those_docs_cli_md_documents_for_each_error_class() -> None:
    import re

    from rl_lustre import errors

    doc = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    table = doc[doc.index("### Exit codes") : doc.index("Errors go to stderr")]
    documented = {
        name: int(code)
        for code, meaning in re.findall(r"^\| (\d+) \| (.+) \|$", table, re.M)
        for name in re.findall(r"`(\w+(?:Error|Interrupted))`", meaning)
    }
    assert set(documented) >= {
        "ConfigError",
        "CredentialsError",
        "PermissionDeniedError",
        "RemoteError",
        "JobFailedError",
        "QuotaExceededError",
    }
    for name, code in documented.items():
        cls = getattr(errors, name)
        assert exit_code(cls.__new__(cls)) == code, name
    # Every class the CLI maps has its line in the doc (or inherits its base's code, as documented).
    for cls, code in EXIT_CODES:
        if cls.__name__ not in documented:
            base = next(b for b in cls.__mro__[1:] if b.__name__ in documented)
            assert documented[base.__name__] == code, cls


def test_click_usage_errors_print_error_as_ours_do(script: Path) -> None:
    code, _, err = invoke("check")
    assert code == 2
    assert err.splitlines()[-1] == "error: Missing argument 'TARGET'."
    assert "Usage:" in err
    assert "check [OPTIONS] TARGET" in err
    assert "Error:" not in err
    code, _, err = invoke("plan", f"{script}:gke", "--no-such-flag")
    assert (code, err.splitlines()[-1]) == (2, "error: No such option '--no-such-flag'.")


def test_check_without_credentials_exits_with_the_credentials_code_and_says_how_to_log_in(
    script: Path, tmp_path: Path
) -> None:
    import os

    # No credentials anywhere: no key file, no gcloud config, no metadata server to ask.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "RL_LUSTRE_GCP_"))}
    env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="True")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "rl-lustre"), "check", f"{script}:gke"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 6, done.stderr
    assert done.stderr.startswith(
        "error: no Google Cloud credentials found: run `gcloud auth application-default login`"
    )
    assert "Traceback" not in done.stderr


def test_goodput_refuses_a_window_with_a_job_and_a_bad_when_before_any_remote_call(script: Path) -> None:
    code, _, err = invoke("goodput", f"{script}:gke", "rl-lustre-x-1", "--since", "1h")
    assert code == 2
    assert "--since" in err
    code, _, err = invoke("goodput", f"{script}:gke", "--since", "last tuesday")
    assert code == 2
    assert "'last tuesday'" in err
    code, _, err = invoke("goodput", f"{script}:gke", "--since", "1h", "--until", "2h")
    assert code == 2
    assert "until" in err
    code, _, err = invoke("goodput", "cli-demo")
    assert code == 2
    assert "--project" in err
