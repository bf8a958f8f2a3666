"""``lakefuse repo create|list|show|delete``."""

from __future__ import annotations

import sys

from lakefuse.cli.context import CliContext, repository_arg, validate_branch_name
from lakefuse.cli.output import format_time, print_fields, print_table, repository_dict, write_json
from lakefuse.errors import AlreadyExists, InvalidArgument, RepositoryNotFound


def register(subparsers, ctx: CliContext) -> None:
    repo = subparsers.add_parser("repo", help="create, list, show and delete repositories",
                                 description="Create, list, show and delete repositories.")
    verbs = repo.add_subparsers(dest="repo_command", metavar="COMMAND", required=True)

    create = verbs.add_parser(
        "create", help="create a repository",
        description="Create a repository with its default branch on an initial empty commit.  Without a "
                    "storage namespace the data goes under the configured storage root.",
        epilog="example: lakefuse repo create lakefs://sales local:///data/sales")
    create.add_argument("repository", metavar="lakefs://REPO")
    create.add_argument("storage_namespace", metavar="STORAGE_NAMESPACE", nargs="?",
                        help="local:///absolute/path, a plain path, or s3://bucket/prefix")
    create.add_argument("--default-branch", default="main", help="name of the default branch (default: main)")
    create.add_argument("--json", action="store_true", help="print the repository as JSON")
    create.set_defaults(func=lambda args: cmd_create(ctx, args))

    listing = verbs.add_parser("list", help="list repositories", description="List repositories.")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=lambda args: cmd_list(ctx, args))

    show = verbs.add_parser("show", help="show a repository", description="Show a repository.")
    show.add_argument("repository", metavar="lakefs://REPO")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=lambda args: cmd_show(ctx, args))

    delete = verbs.add_parser(
        "delete", help="delete a repository",
        description="Delete a repository's branches, tags, commits and staged changes.  The stored objects "
                    "stay in its storage namespace.  Asks for confirmation unless --yes.")
    delete.add_argument("repository", metavar="lakefs://REPO")
    delete.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(func=lambda args: cmd_delete(ctx, args))


def cmd_create(ctx: CliContext, args) -> int:
    name = repository_arg(args.repository)
    validate_branch_name(args.default_branch)
    if args.storage_namespace is not None:
        from lakefuse.block.namespace import parse_namespace

        parse_namespace(args.storage_namespace)  # InvalidArgument before anything is touched
    app = ctx.app()
    catalog = app.catalog
    try:
        catalog.get_repository(name)
    except RepositoryNotFound:
        pass
    else:
        raise AlreadyExists(f"repository {name!r} already exists")
    namespace = args.storage_namespace or app.default_namespace(name)
    repo = catalog.create_repository(name, namespace, args.default_branch)
    if args.json:
        write_json(repository_dict(repo))
        return 0
    out = ctx.out
    out.write(f"Repository 'lakefs://{repo.id}' created\n")
    print_fields([("Storage namespace", repo.storage_namespace), ("Default branch", repo.default_branch)], out)
    return 0


def cmd_list(ctx: CliContext, args) -> int:
    repos = ctx.catalog.list_repositories()
    if args.json:
        write_json([repository_dict(repo) for repo in repos])
        return 0
    print_table(("REPOSITORY", "DEFAULT BRANCH", "CREATED", "STORAGE NAMESPACE"),
                [(repo.id, repo.default_branch, format_time(repo.creation_date), repo.storage_namespace)
                 for repo in repos], ctx.out)
    return 0


def cmd_show(ctx: CliContext, args) -> int:
    name = repository_arg(args.repository)
    catalog = ctx.catalog
    repo = catalog.get_repository(name)
    branches = catalog.list_branches(name)
    tags = catalog.list_tags(name)
    if args.json:
        write_json({**repository_dict(repo), "branches": len(branches), "tags": len(tags)})
        return 0
    print_fields([
        ("Repository", f"lakefs://{repo.id}"),
        ("Storage namespace", repo.storage_namespace),
        ("Default branch", repo.default_branch),
        ("Created", format_time(repo.creation_date)),
        ("Branches", len(branches)),
        ("Tags", len(tags)),
    ], ctx.out)
    return 0


def cmd_delete(ctx: CliContext, args) -> int:
    name = repository_arg(args.repository)
    if not args.yes:
        _confirm(f"Delete repository lakefs://{name} (its branches, tags, commits and uncommitted changes)?")
    catalog = ctx.catalog
    catalog.get_repository(name)
    catalog.delete_repository(name)
    ctx.out.write(f"Repository 'lakefs://{name}' deleted (its objects stay in the storage namespace)\n")
    return 0


def _confirm(question: str) -> None:
    if not sys.stdin or not sys.stdin.isatty():
        raise InvalidArgument("refusing to delete without confirmation: pass --yes (no terminal to ask on)")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise InvalidArgument("not confirmed; nothing deleted")
