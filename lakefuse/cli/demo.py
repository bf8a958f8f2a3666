"""``lakefuse demo``: the README's main job on the embedded default.

Creates (or reuses: every step is skipped when already done) the repository ``demo`` with
sample data under ``tables/`` and a README committed on ``main`` in two commits (January's data
first, then February's sales: so ``main~1`` is an older commit that still has files), the tag
``v1`` and the branch ``dev``; then mounts every repository at ``--mountpoint`` (default
``/mnt/lakefuse``, created if missing) in the background with ``lakefuse mount`` and prints
what to try.  If the mount command is not available or the mount fails, it prints the
repository and how to mount by hand; ``--no-mount`` only shows the repository (``fs ls -r``
and ``log``).
"""

from __future__ import annotations

import os
import subprocess
import sys

from lakefuse.cli.context import CliContext, default_committer
from lakefuse.cli.output import print_commit
from lakefuse.errors import LakefuseError, RefNotFound, RepositoryNotFound

DEMO_REPOSITORY = "demo"
DEMO_TAG = "v1"
DEMO_BRANCH = "dev"
DEFAULT_MOUNTPOINT = "/mnt/lakefuse"
MOUNT_TIMEOUT_SECONDS = 180.0
SAMPLE_COMMIT_MESSAGE = "Add sample data"
SECOND_COMMIT_MESSAGE = "Add February sales"
#: committed on top of the rest of SAMPLE_FILES, by a second commit
SECOND_COMMIT_FILES = ("tables/sales/2024-02.csv",)

SAMPLE_FILES: dict[str, str] = {
    "README.md": (
        "# demo\n\n"
        "Sample data of the lakefuse demo: a few tables as CSV and JSON files.\n"
        "Every branch of this repository is a directory of the mount; write on `dev`,\n"
        "commit with `.lakefuse/commit` or `lakefuse commit`, compare with `lakefuse diff`.\n"
    ),
    "tables/sales/2024-01.csv": (
        "date,store,product,quantity,amount\n"
        "2024-01-03,berlin,espresso,12,30.00\n"
        "2024-01-03,paris,croissant,40,60.00\n"
        "2024-01-04,berlin,croissant,25,37.50\n"
        "2024-01-05,lisbon,pastel,60,72.00\n"
    ),
    "tables/sales/2024-02.csv": (
        "date,store,product,quantity,amount\n"
        "2024-02-01,paris,espresso,18,45.00\n"
        "2024-02-02,lisbon,espresso,22,44.00\n"
        "2024-02-02,berlin,pastel,15,22.50\n"
    ),
    "tables/products/products.csv": (
        "product,category,price\n"
        "espresso,coffee,2.50\n"
        "croissant,bakery,1.50\n"
        "pastel,bakery,1.20\n"
    ),
    "tables/stores/stores.json": (
        '[\n'
        '  {"store": "berlin", "country": "DE", "opened": "2019-05-01"},\n'
        '  {"store": "lisbon", "country": "PT", "opened": "2021-09-15"},\n'
        '  {"store": "paris", "country": "FR", "opened": "2018-02-20"}\n'
        ']\n'
    ),
}


def register(subparsers, ctx: CliContext) -> None:
    demo = subparsers.add_parser(
        "demo", help="create a demo repository and mount it",
        description="Create (or reuse) the repository 'demo' with sample data, tag v1 and branch dev, mount "
                    "every repository in the background and print what to try.")
    demo.add_argument("--mountpoint", default=DEFAULT_MOUNTPOINT,
                      help=f"where to mount (default {DEFAULT_MOUNTPOINT}; created if missing)")
    demo.add_argument("--no-mount", action="store_true", help="only create the repository and show it")
    demo.set_defaults(func=lambda args: cmd_demo(ctx, args))


def _say(ctx: CliContext, text: str = "") -> None:
    ctx.out.write(text + "\n")


def prepare_repository(ctx: CliContext) -> list[str]:
    """Create whatever of the demo is missing; what was done, one phrase per step."""
    app = ctx.app()
    catalog = app.catalog
    done = []
    try:
        repo = catalog.get_repository(DEMO_REPOSITORY)
    except RepositoryNotFound:
        repo = catalog.create_repository(DEMO_REPOSITORY, app.default_namespace(DEMO_REPOSITORY))
        done.append(f"created repository lakefs://{DEMO_REPOSITORY} ({repo.storage_namespace})")
    main = repo.default_branch
    if not catalog.list_objects(DEMO_REPOSITORY, main, limit=1).items:
        catalog.reset(DEMO_REPOSITORY, main)
        committer = default_committer(ctx)
        first = [path for path in SAMPLE_FILES if path not in SECOND_COMMIT_FILES]
        for message, paths in ((SAMPLE_COMMIT_MESSAGE, first), (SECOND_COMMIT_MESSAGE, SECOND_COMMIT_FILES)):
            for path in paths:
                _upload_sample(catalog, main, path)
            commit = catalog.commit(DEMO_REPOSITORY, main, message, committer, {"source": "lakefuse demo"})
            done.append(f"committed {len(paths)} sample files on '{main}' ({commit.id[:12]}: {message})")
    try:
        catalog.get_tag(DEMO_REPOSITORY, DEMO_TAG)
    except RefNotFound:
        commit_id = catalog.create_tag(DEMO_REPOSITORY, DEMO_TAG, main)
        done.append(f"tagged '{main}' as '{DEMO_TAG}' ({commit_id[:12]})")
    try:
        catalog.get_branch(DEMO_REPOSITORY, DEMO_BRANCH)
    except RefNotFound:
        catalog.create_branch(DEMO_REPOSITORY, DEMO_BRANCH, main)
        done.append(f"created branch '{DEMO_BRANCH}' from '{main}'")
    return done


def _upload_sample(catalog, branch: str, path: str) -> None:
    content_type = "text/csv" if path.endswith(".csv") else (
        "application/json" if path.endswith(".json") else "text/markdown")
    catalog.upload_bytes(DEMO_REPOSITORY, branch, path, SAMPLE_FILES[path].encode("utf-8"), content_type=content_type)


def show_repository(ctx: CliContext) -> None:
    from lakefuse.cli.fs_commands import print_listing

    catalog = ctx.catalog
    main = catalog.get_repository(DEMO_REPOSITORY).default_branch
    _say(ctx, f"$ lakefuse fs ls -r lakefs://{DEMO_REPOSITORY}/{main}/")
    print_listing(catalog, DEMO_REPOSITORY, main, "", True, False, ctx.out)
    _say(ctx)
    _say(ctx, f"$ lakefuse log lakefs://{DEMO_REPOSITORY}/{main}")
    for commit in catalog.log(DEMO_REPOSITORY, main, all_parents=True):  # as 'lakefuse log' shows it
        print_commit(commit, ctx.out)


def _mount_command(ctx: CliContext, mountpoint: str) -> list[str]:
    command = [sys.executable, "-m", "lakefuse.cli.main"]
    if ctx.config_path:
        command += ["--config", os.path.abspath(ctx.config_path)]
    return command + ["mount", mountpoint]


def mount_in_background(ctx: CliContext, mountpoint: str) -> str | None:
    """Mount every repository at ``mountpoint`` (daemonized); None, or why it did not work."""
    from lakefuse.cli.delegated import DELEGATED

    if DELEGATED[0].available_module() is None:
        return "the mount command is not available in this installation"
    try:
        os.makedirs(mountpoint, exist_ok=True)
    except OSError as exc:
        return f"cannot create {mountpoint}: {exc.strerror}"
    if os.listdir(mountpoint):
        return f"{mountpoint} is not empty"
    ctx.close()  # the mount opens its own App
    try:
        result = subprocess.run(_mount_command(ctx, mountpoint), stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=MOUNT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return f"the mount did not answer within {MOUNT_TIMEOUT_SECONDS:.0f} s"
    except OSError as exc:
        return f"cannot run the mount command: {exc.strerror}"
    if result.returncode != 0:
        lines = [line for line in (result.stderr or "").splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit code {result.returncode}"
        return reason.removeprefix("lakefuse: error: ")
    return None


def _already_mounted(mountpoint: str) -> bool:
    return os.path.ismount(mountpoint) and os.path.isdir(os.path.join(mountpoint, DEMO_REPOSITORY))


def print_tips(ctx: CliContext, mountpoint: str) -> None:
    root = os.path.join(mountpoint, DEMO_REPOSITORY)
    dev = os.path.join(root, DEMO_BRANCH)
    tips = [
        ("branches and tags of the repository", f"ls {root}"),
        ("read committed data", f"cat {root}/main/tables/sales/2024-01.csv"),
        ("a tag, read-only", f"ls {root}/{DEMO_TAG}/tables"),
        ("an older commit (before February's sales), read-only", f"ls {root}/main~1/tables/sales"),
        ("write on the dev branch", f"cp {root}/main/tables/sales/2024-02.csv {dev}/tables/sales/2024-03.csv"),
        ("see what is not committed yet", f"cat {dev}/.lakefuse/status"),
        ("commit through the control file", f"echo 'Add March' > {dev}/.lakefuse/commit; cat {dev}/.lakefuse/commit"),
        ("change more, commit with the CLI",
         f"echo 'cold brew,coffee,3.20' >> {dev}/tables/products/products.csv; "
         f"lakefuse commit {dev} -m 'Add cold brew'"),
        ("compare the branches", f"lakefuse diff lakefs://{DEMO_REPOSITORY}/main lakefs://{DEMO_REPOSITORY}/{DEMO_BRANCH}"),
        ("merge dev into main", f"lakefuse merge lakefs://{DEMO_REPOSITORY}/{DEMO_BRANCH} lakefs://{DEMO_REPOSITORY}/main"),
        ("history", f"lakefuse log lakefs://{DEMO_REPOSITORY}/main"),
        ("unmount", f"lakefuse umount {mountpoint}"),
    ]
    _say(ctx, "Things to try:")
    for what, command in tips:
        _say(ctx, f"  # {what}")
        _say(ctx, f"  {command}")


def cmd_demo(ctx: CliContext, args) -> int:
    mountpoint = os.path.abspath(os.path.expanduser(args.mountpoint))
    if os.path.exists(mountpoint) and not os.path.isdir(mountpoint):
        from lakefuse.errors import InvalidArgument

        raise InvalidArgument(f"--mountpoint {mountpoint}: not a directory")
    for step in prepare_repository(ctx) or ["the demo repository is ready (nothing to create)"]:
        _say(ctx, f"demo: {step}")
    _say(ctx)
    if args.no_mount:
        show_repository(ctx)
        return 0
    if _already_mounted(mountpoint):
        _say(ctx, f"lakefuse is already mounted at {mountpoint}.")
        _say(ctx)
        print_tips(ctx, mountpoint)
        return 0
    problem = mount_in_background(ctx, mountpoint)
    if problem is not None:
        _say(ctx, f"demo: not mounted: {problem}")
        _say(ctx)
        try:
            show_repository(ctx)
        except LakefuseError as exc:
            _say(ctx, f"demo: cannot show the repository: {exc}")
        _say(ctx, "To mount it yourself (needs FUSE: /dev/fuse and fusermount3):")
        _say(ctx, f"  mkdir -p {mountpoint} && lakefuse mount {mountpoint}")
        return 0
    _say(ctx, f"Mounted every repository at {mountpoint} (in the background).")
    _say(ctx)
    print_tips(ctx, mountpoint)
    return 0
