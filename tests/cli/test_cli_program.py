"""The program around the commands: light start-up, ``--help`` everywhere, ``--version``,
``--config``, delegated command groups, ``cache status``."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

import lakefuse
from lakefuse.cli import delegated as cli_delegated
from lakefuse.cli import main as cli_main

from .conftest import REPO_ROOT

HEAVY = ("sqlalchemy", "boto3", "botocore", "pyspark", "pyfuse3", "trio", "lakefuse.app", "lakefuse.actions")
# ``gc --help`` / ``mount --help`` load their command modules, which must stay light too

CHECK_IMPORTS = """
import sys
from lakefuse.cli.main import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r} or m in {heavy!r})
print('HEAVY=' + ','.join(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--help"], [], ["repo", "--help"], ["fs", "upload", "--help"], ["--version"],
                                  ["gc", "--help"], ["mount", "--help"]])
def test_start_up_imports_nothing_heavy(argv):
    script = CHECK_IMPORTS.format(heavy=set(h.split(".")[0] for h in HEAVY if "." not in h) | set(HEAVY))
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60,
                          cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    heavy_line = [line for line in done.stderr.splitlines() if line.startswith("HEAVY=")]
    assert heavy_line == ["HEAVY="], done.stderr


def test_version(cli):
    result = cli("--version")
    assert result.code == 0 and result.out.strip() == f"lakefuse {lakefuse.__version__}"


def test_no_arguments_prints_help(cli):
    result = cli()
    assert result.code == 0 and "usage: lakefuse" in result.out and "demo" in result.out


HELP_PATHS = [
    ["repo", "create"], ["repo", "list"], ["repo", "show"], ["repo", "delete"],
    ["branch", "create"], ["branch", "list"], ["branch", "show"], ["branch", "delete"], ["branch", "reset"],
    ["branch", "revert"],
    ["tag", "create"], ["tag", "list"], ["tag", "show"], ["tag", "delete"],
    ["fs", "ls"], ["fs", "cat"], ["fs", "stat"], ["fs", "upload"], ["fs", "download"], ["fs", "rm"],
    ["commit"], ["log"], ["show"], ["diff"], ["merge"], ["cache", "status"], ["demo"],
    ["mount"], ["umount"], ["actions"], ["actions", "validate"], ["import"], ["export"], ["gc"],
]


def test_help_everywhere(cli):
    top = cli("--help")
    assert top.code == 0
    for command in ("repo", "branch", "tag", "fs", "commit", "log", "show", "diff", "merge", "cache", "mount",
                    "umount", "actions", "demo"):
        assert f"    {command} " in top.out, command
    for path in HELP_PATHS:
        result = cli(*path, "--help")
        assert result.code == 0, (path, result.err)
        assert result.out.startswith(f"usage: lakefuse {' '.join(path)}"), path


def test_actions_commands_are_delegated(cli, tmp_path):
    action = tmp_path / "ok.yaml"
    action.write_text("on:\n  pre-commit:\nhooks:\n  - id: ab\n    type: webhook\n    properties:\n"
                      "      url: http://127.0.0.1:1/x\n")
    result = cli("actions", "validate", action)
    assert result.code == 0 and "validated" in result.out
    broken = tmp_path / "broken.yaml"
    broken.write_text("hooks: []\n")
    result = cli("actions", "validate", broken)
    assert result.code == 2 and len(result.err_lines) == 1


def test_missing_delegated_module_is_not_registered(cli, monkeypatch):
    missing = cli_delegated.Delegated(("mount", "umount"), ("m", "u"), ("lakefuse.no_such_module",),
                                     "add_mount_arguments", cli_delegated._register_mount)
    monkeypatch.setattr(cli_delegated, "DELEGATED", (missing,) + cli_delegated.DELEGATED[1:])
    assert "    mount " not in cli("--help").out
    result = cli("mount", "/tmp")
    assert result.code == 2 and "invalid choice" in result.err


@pytest.fixture
def fake_spark(monkeypatch, tmp_path):
    """A stand-in ``lakefuse.fake_spark`` module defining ``add_spark_commands``."""
    calls = {"registered": 0, "config": None}
    module = types.ModuleType("lakefuse.fake_spark")

    def add_spark_commands(subparsers, app_factory):
        calls["registered"] += 1
        for name in ("import", "export", "gc"):
            parser = subparsers.add_parser(name, help=f"fake {name}")
            parser.add_argument("--dry-run", action="store_true")
            parser.set_defaults(func=lambda args, name=name: _run_fake(calls, name, app_factory))

    module.add_spark_commands = add_spark_commands
    source = tmp_path / "fake_spark.py"
    source.write_text("def add_spark_commands(subparsers, app_factory): ...\n")
    monkeypatch.setitem(sys.modules, "lakefuse.fake_spark", module)
    real_source = cli_delegated._module_source
    monkeypatch.setattr(cli_delegated, "_module_source",
                        lambda name: str(source) if name == "lakefuse.fake_spark" else real_source(name))
    spark = cli_delegated.Delegated(("import", "export", "gc"), ("i", "e", "g"), ("lakefuse.fake_spark",),
                                    "add_spark_commands", cli_delegated._register_spark)
    monkeypatch.setattr(cli_delegated, "DELEGATED", cli_delegated.DELEGATED[:2] + (spark,))
    return calls


def _run_fake(calls, name, app_factory):
    import os

    calls["ran"] = name
    calls["config"] = os.environ.get("LAKEFUSE_CONFIG")
    calls["app"] = app_factory()
    return 0


def test_spark_commands_load_only_when_chosen(cli, fake_spark, tmp_path):
    top = cli("--help")
    assert "    import " in top.out and "    gc " in top.out
    assert fake_spark["registered"] == 0  # placeholders only
    config = tmp_path / "config.yaml"
    config.write_text("cache:\n  disk_bytes: 1GiB\n")
    result = cli("--config", config, "gc", "--dry-run")
    assert result.code == 0, result.err
    assert fake_spark["registered"] == 1 and fake_spark["ran"] == "gc"
    assert fake_spark["config"] == str(config)  # --config reaches delegated modules
    assert fake_spark["app"].catalog is not None
    import os

    assert "LAKEFUSE_CONFIG" not in os.environ


def test_config_option_and_cache_status(cli, sales, tmp_path):
    status = json.loads(cli("cache", "status", "--json").out)
    caches = {c["directory"]: c for c in status["caches"]}
    assert caches["graveler"]["entries"] >= 1
    assert caches["graveler"]["hits"] + caches["graveler"]["misses"] >= 1
    human = cli("cache", "status")
    assert human.code == 0 and "graveler" in human.out and "HIT RATE" in human.out

    config = tmp_path / "config.yaml"
    config.write_text(f"cache:\n  dir: {tmp_path / 'other-cache'}\n")
    other = json.loads(cli("--config", config, "cache", "status", "--json").out)
    assert other == {"cache_dir": str(tmp_path / "other-cache"), "caches": []}
    assert "No caches yet" in cli("--config", config, "cache", "status").out

    broken = tmp_path / "broken.yaml"
    broken.write_text("nonsense: [\n")
    result = cli("--config", broken, "repo", "list")
    assert result.code == 2 and len(result.err_lines) == 1 and "YAML" in result.err


def test_command_word_skips_global_options():
    assert cli_main._command_word(["--config", "x.yaml", "mount", "/m"]) == "mount"
    assert cli_main._command_word(["-c", "x.yaml", "gc"]) == "gc"
    assert cli_main._command_word(["--config=x.yaml", "repo", "list"]) == "repo"
    assert cli_main._command_word(["--help"]) is None
