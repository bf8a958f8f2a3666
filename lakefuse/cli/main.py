"""The ``lakefuse`` program: the parser and the one error boundary.

``main(argv=None) -> int`` parses, runs the chosen command and turns what it raises into an
exit code, exactly once:

- ``LakefuseError``: one line ``lakefuse: error: <message>`` on stderr, exit ``.exit_code``
  (see ``lakefuse.errors``); merge conflicts add one ``conflict: <path>`` line per path, hook
  failures one ``hook failure: ...`` line per failed hook when several failed;
- bad usage (argparse): the same one line, exit 2 (``--help`` shows usage);
- ``KeyboardInterrupt``: exit 130; ``BrokenPipeError`` on stdout (``lakefuse ... | head``):
  exit 141 quietly, like a process ended by SIGPIPE;
- anything else is a bug: ``lakefuse: internal error: <type>: <message>``, exit 1, with the
  traceback only when ``LAKEFUSE_DEBUG=1`` (which also logs at DEBUG level).

Delegated commands (``mount``/``umount`` of ``lakefuse.fuse.mountcmd``, ``actions`` of
``lakefuse.actions.cli``, ``import``/``export``/``gc`` of ``lakefuse.spark``) are registered only
when their module exists, and imported only when one of their names is the command being run:
otherwise a placeholder carries their help line, so start-up never pays for them.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from contextlib import contextmanager

import lakefuse
from lakefuse.cli import (
    cache_commands,
    delegated,
    demo,
    fs_commands,
    mounts_command,
    ref_commands,
    repo_commands,
    version_commands,
)
from lakefuse.cli.context import CliContext
from lakefuse.errors import HookFailed, InvalidArgument, LakefuseError, MergeConflict

PROG = "lakefuse"
DEBUG_ENV = "LAKEFUSE_DEBUG"
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class UsageError(InvalidArgument):
    """Bad command line."""


class CliParser(argparse.ArgumentParser):
    """argparse with errors raised as ``UsageError`` (one line, exit 2) instead of usage dumps."""

    def error(self, message: str):
        command = self.prog[len(PROG):].strip()
        where = f"{command}: " if command else ""
        raise UsageError(f"{where}{message} (see '{self.prog} --help')")


def _command_word(argv: list[str]) -> str | None:
    """The command about to run: the first argument that is not a global option."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--config", "-c"):
            skip = True
        elif token == "--":
            return None
        elif not token.startswith("-"):
            return token
    return None


def _add_delegated(subparsers, ctx: CliContext, command: delegated.Delegated, chosen: str | None) -> bool:
    """Register ``command`` (for real if ``chosen`` is one of its names); whether it did."""
    module_name = command.available_module()
    if module_name is None:
        return False
    if chosen in command.names:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise InvalidArgument(f"'{chosen}' is not available here: {exc}") from None
        command.register(module, subparsers, ctx)
        return True
    for name, help_text in zip(command.names, command.helps):
        subparsers.add_parser(name, help=help_text, add_help=False)
    return True


def build_parser(argv: list[str] | None = None, ctx: CliContext | None = None) -> CliParser:
    """The parser; delegated commands are loaded only if ``argv`` runs one of them."""
    ctx = ctx or CliContext()
    chosen = _command_word(list(argv or ()))
    parser = CliParser(
        prog=PROG,
        description="Git-like version control over an object store (the lakeFS model), mounted as a filesystem.",
        epilog="Start with 'lakefuse demo'.  Every command has --help.  Set LAKEFUSE_DEBUG=1 for tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {lakefuse.__version__}")
    parser.add_argument("--config", "-c", metavar="FILE",
                        help="configuration file (default: $LAKEFUSE_CONFIG or $LAKEFUSE_HOME/config.yaml)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    repo_commands.register(subparsers, ctx)
    ref_commands.register(subparsers, ctx)
    fs_commands.register(subparsers, ctx)
    version_commands.register(subparsers, ctx)
    cache_commands.register(subparsers, ctx)
    mounts_command.register(subparsers, ctx)
    for command in delegated.DELEGATED:
        _add_delegated(subparsers, ctx, command, chosen)
    demo.register(subparsers, ctx)
    return parser


# --------------------------------------------------------------------------------------------
# running


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


@contextmanager
def _logging(debug: bool, enabled: bool):
    """Library log records of ``lakefuse.*`` on stderr, one line each: ERROR and above (a failed
    post-commit hook, say), everything with ``LAKEFUSE_DEBUG``."""
    if not enabled:
        yield
        return
    import logging

    class OneLine(logging.Formatter):
        def format(self, record):
            text = f"{PROG}: {record.levelname.lower()}: {_one_line(record.getMessage())}"
            if record.exc_info and record.exc_info[1] is not None:
                if debug:
                    text += "\n" + self.formatException(record.exc_info)
                else:
                    text += f": {_one_line(str(record.exc_info[1]))}"
            return text

    logger = logging.getLogger("lakefuse")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine())
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.ERROR)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


@contextmanager
def _config_for_delegated(config_path: str | None, is_delegated: bool):
    """Delegated modules read the configuration themselves: pass ``--config`` on to them."""
    if not (config_path and is_delegated):
        yield
        return
    previous = os.environ.get("LAKEFUSE_CONFIG")
    os.environ["LAKEFUSE_CONFIG"] = os.path.abspath(config_path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("LAKEFUSE_CONFIG", None)
        else:
            os.environ["LAKEFUSE_CONFIG"] = previous


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def report_error(exc: LakefuseError, stream) -> None:
    stream.write(f"{PROG}: error: {_one_line(exc.message) or type(exc).__name__}\n")
    if isinstance(exc, MergeConflict):
        for path in exc.conflicts:
            stream.write(f"conflict: {path}\n")
    elif isinstance(exc, HookFailed):
        failures = exc.details.get("failures") or []
        if len(failures) > 1:
            for failure in failures:
                stream.write(f"hook failure: {_one_line(failure)}\n")


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _run(argv: list[str]) -> int:
    ctx = CliContext()
    try:
        parser = build_parser(argv, ctx)
        if not argv:
            parser.print_help()
            return 0
        args = parser.parse_args(argv)
        ctx.config_path = args.config
        chosen = next((d for d in delegated.DELEGATED if args.command in d.names), None)
        with _logging(_debug(), enabled=not (chosen and chosen.own_logging)), \
                _config_for_delegated(args.config, chosen is not None):
            code = args.func(args)
        sys.stdout.flush()
        return int(code or 0)
    finally:
        ctx.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run(argv)
    except LakefuseError as exc:
        report_error(exc, sys.stderr)
        if _debug():
            import traceback

            traceback.print_exc(file=sys.stderr)
        code = exc.exit_code
        return code if isinstance(code, int) and 0 < code < 256 else 1
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug, reported in one line
        sys.stderr.write(f"{PROG}: internal error: {type(exc).__name__}: {_one_line(str(exc))}\n")
        if _debug():
            import traceback

            traceback.print_exc(file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
