"""``lakefuse fs ls|cat|stat|upload|download|rm``: objects of a ref.

Decisions: ``ls`` without ``--recursive`` groups by ``/`` like ``lakectl fs ls`` and prints
paths relative to the directory of the given prefix; a path ending in ``/`` given to ``upload``
names a directory (the source's file name is appended).  ``upload --recursive`` writes every
file's data first and stages all entries in one transaction at the end, so an interrupted upload
stages nothing; ``rm --recursive`` stages its deletions in one transaction too.  Downloads go to a
temporary file beside the destination, renamed into place once size and checksum are verified.
"""

from __future__ import annotations

import os
import stat
import sys

from lakefuse.cli.context import CliContext, object_arg, ref_arg, require_branch
from lakefuse.cli.output import entry_dict, format_time, human_size, posix_of, print_fields, write_json
from lakefuse.errors import InvalidArgument, ObjectNotFound

CHUNK = 1024 * 1024
STDIO = "-"


def register(subparsers, ctx: CliContext) -> None:
    fs = subparsers.add_parser("fs", help="list, read, upload, download and remove objects",
                               description="List, read, upload, download and remove the objects of a ref.")
    verbs = fs.add_subparsers(dest="fs_command", metavar="COMMAND", required=True)

    ls = verbs.add_parser("ls", help="list objects",
                          description="List the objects and directories (common prefixes) under a path prefix.",
                          epilog="example: lakefuse fs ls lakefs://sales/main/tables/")
    ls.add_argument("uri", metavar="lakefs://REPO/REF[/PREFIX]")
    ls.add_argument("-r", "--recursive", action="store_true", help="list every object under the prefix")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=lambda args: cmd_ls(ctx, args))

    cat = verbs.add_parser("cat", help="print an object", description="Write an object's bytes to stdout.")
    cat.add_argument("uri", metavar="lakefs://REPO/REF/PATH")
    cat.set_defaults(func=lambda args: cmd_cat(ctx, args))

    stat = verbs.add_parser("stat", help="show an object's metadata", description="Show an object's metadata.")
    stat.add_argument("uri", metavar="lakefs://REPO/REF/PATH")
    stat.add_argument("--json", action="store_true", help="print JSON")
    stat.set_defaults(func=lambda args: cmd_stat(ctx, args))

    upload = verbs.add_parser(
        "upload", help="upload a file (or a directory with --recursive)",
        description="Upload a local file, stdin (--source -) or a directory (--recursive) to a branch; the "
                    "objects are staged, commit them with 'lakefuse commit'.",
        epilog="example: lakefuse fs upload lakefs://sales/dev/a/b.csv --source ./b.csv")
    upload.add_argument("uri", metavar="lakefs://REPO/BRANCH/PATH")
    upload.add_argument("-s", "--source", required=True, metavar="FILE|DIR|-", help="what to upload; - for stdin")
    upload.add_argument("-r", "--recursive", action="store_true",
                        help="upload every file under the directory SOURCE to the PATH prefix")
    upload.add_argument("--content-type", help="content type (default: guessed from the file name)")
    upload.set_defaults(func=lambda args: cmd_upload(ctx, args))

    download = verbs.add_parser(
        "download", help="download an object (or a prefix with --recursive)",
        description="Download an object to a file (default: its name, in the current directory) or to "
                    "stdout (--dest -); with --recursive every object under a prefix into a directory.")
    download.add_argument("uri", metavar="lakefs://REPO/REF/PATH")
    download.add_argument("-d", "--dest", metavar="FILE|DIR|-", help="where to write; - for stdout")
    download.add_argument("-r", "--recursive", action="store_true",
                          help="download every object under the prefix into the directory DEST (default: .)")
    download.set_defaults(func=lambda args: cmd_download(ctx, args))

    rm = verbs.add_parser("rm", help="remove objects", description="Stage the removal of an object (or of "
                          "every object under a prefix with --recursive).")
    rm.add_argument("uri", metavar="lakefs://REPO/BRANCH/PATH")
    rm.add_argument("-r", "--recursive", action="store_true", help="remove every object under the prefix")
    rm.set_defaults(func=lambda args: cmd_rm(ctx, args))


# --------------------------------------------------------------------------------------------
# reading


def cmd_ls(ctx: CliContext, args) -> int:
    uri = ref_arg(args.uri, allow_path=True)
    print_listing(ctx.catalog, uri.repository, uri.ref, uri.path or "", args.recursive, args.json, ctx.out)
    return 0


def print_listing(catalog, repository: str, ref: str, prefix: str, recursive: bool, as_json: bool, out) -> None:
    """``fs ls``: rows streamed as the listing pages arrive (JSON: one item per line)."""
    base = prefix[: prefix.rfind("/") + 1]
    items = catalog.iter_objects(repository, ref, prefix, "" if recursive else "/")
    if as_json:
        import json

        out.write("[")
        separator = "\n"
        for item in items:
            data = {"path": item.path, "path_type": "common_prefix"} if item.is_prefix else entry_dict(item.path, item.entry)
            out.write(separator + "  " + json.dumps(data, ensure_ascii=False))
            separator = ",\n"
        out.write("\n]\n" if separator == ",\n" else "]\n")
        return
    for item in items:
        name = item.path[len(base):]
        if item.is_prefix:
            out.write(f"{'common_prefix':<13}  {'':<23}  {'':>10}  {name}\n")
        else:
            entry = item.entry
            posix = posix_of(item.path, entry) or {}
            kind = "object" if posix.get("type", "file") in ("file", "directory") else posix["type"]
            target = f" -> {posix['target']}" if "target" in posix else ""
            out.write(f"{kind:<13}  {format_time(entry.mtime):<23}  {human_size(entry.size):>10}  {name}{target}\n")


def cmd_stat(ctx: CliContext, args) -> int:
    uri = object_arg(args.uri)
    entry = ctx.catalog.stat(uri.repository, uri.ref, uri.path)
    if args.json:
        write_json(entry_dict(uri.path, entry))
        return 0
    fields = [
        ("Path", uri.path),
        ("Modified time", format_time(entry.mtime)),
        ("Size", f"{entry.size} bytes"),
        ("Human size", human_size(entry.size)),
        ("Physical address", entry.physical_address),
        ("Checksum", entry.checksum),
        ("Content-Type", entry.content_type),
    ]
    fields += _posix_fields(uri.path, entry)
    fields += [(f"Metadata {key}", entry.metadata[key]) for key in sorted(entry.metadata)]
    print_fields(fields, ctx.out)
    return 0


def _posix_fields(path: str, entry) -> list[tuple[str, object]]:
    """``stat``'s lines for the POSIX keys of an entry (none when it has none)."""
    from lakefuse.posix import DEVICE_FORMATS, FORMAT_OF_TYPE, mode_string, permissions

    posix = posix_of(path, entry)
    if posix is None:
        return []
    fmt = FORMAT_OF_TYPE.get(str(posix["type"]), stat.S_IFDIR if posix["type"] == "directory" else stat.S_IFREG)
    default = 0o777 if fmt == stat.S_IFLNK else 0o755 if fmt == stat.S_IFDIR else 0o644
    perms = permissions(entry.metadata, default)
    fields: list[tuple[str, object]] = [("Type", posix["type"]), ("Mode", f"{mode_string(fmt, perms)} ({perms:04o})")]
    if "uid" in posix or "gid" in posix:
        fields.append(("Owner", f"{posix.get('uid', '-')}:{posix.get('gid', '-')}"))
    if "target" in posix:
        fields.append(("Link target", posix["target"]))
    if fmt in DEVICE_FORMATS:
        fields.append(("Device", posix["rdev"]))
    for key, label in (("atime_ns", "Access time"), ("ctime_ns", "Change time")):
        if key in posix:
            ns = int(posix[key])
            fields.append((label, f"{format_time(ns // 1_000_000_000)} (+{ns % 1_000_000_000} ns)"))
    return fields


def _stream_entry(catalog, repository: str, entry, write) -> None:
    """Pass an object's bytes to ``write`` chunk by chunk, then check size and checksum."""
    from lakefuse.catalog import ChecksumVerifier

    reader = catalog.open_entry(repository, entry)
    verifier = ChecksumVerifier(entry)
    offset = 0
    while offset < entry.size:
        chunk = reader.read(offset, CHUNK)
        if not chunk:
            break
        verifier.update(chunk)
        write(chunk)
        offset += len(chunk)
    reader.close()
    verifier.check()


def _stdout_binary():
    sys.stdout.flush()
    return sys.stdout.buffer


def cmd_cat(ctx: CliContext, args) -> int:
    uri = object_arg(args.uri)
    catalog = ctx.catalog
    entry = catalog.stat(uri.repository, uri.ref, uri.path)
    out = _stdout_binary()
    _stream_entry(catalog, uri.repository, entry, out.write)
    out.flush()
    return 0


# --------------------------------------------------------------------------------------------
# writing


def _check_key(path: str) -> str:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"object path {path!r} is not valid UTF-8") from None
    if not path:
        raise InvalidArgument("empty object path")
    return path


def _content_type(name: str, given: str | None) -> str | None:
    if given:
        return given
    import mimetypes

    guessed, _encoding = mimetypes.guess_type(name, strict=False)
    return guessed


def cmd_upload(ctx: CliContext, args) -> int:
    if args.recursive:
        return _upload_directory(ctx, args)
    uri = object_arg(args.uri)
    source = args.source
    path = uri.path
    if source == STDIO:
        if path.endswith("/"):
            raise InvalidArgument(f"{args.uri}: ends with '/'; name the object to upload stdin to")
    else:
        if os.path.isdir(source):
            raise InvalidArgument(f"{source}: is a directory (use --recursive)")
        if not os.path.isfile(source) or not os.access(source, os.R_OK):
            raise InvalidArgument(f"{source}: no such readable file")
        if path.endswith("/"):
            path += os.path.basename(source)
    _check_key(path)
    content_type = _content_type(path, args.content_type)
    catalog = ctx.catalog
    require_branch(catalog, uri.repository, uri.ref)
    if source == STDIO:
        entry = catalog.upload_stream(uri.repository, uri.ref, path, sys.stdin.buffer, content_type=content_type)
    else:
        entry = catalog.upload_file(uri.repository, uri.ref, path, source, content_type=content_type)
    ctx.out.write(f"Uploaded lakefs://{uri.repository}/{uri.ref}/{path} ({human_size(entry.size)}, "
                  f"checksum {entry.checksum})\n")
    return 0


def _local_files(directory: str) -> list[tuple[str, str]]:
    """``(relative path with '/', local path)`` of every file under ``directory``, sorted."""
    files = []
    for root, dirs, names in os.walk(directory, onerror=_raise_walk_error):
        dirs.sort()
        for name in sorted(names):
            local = os.path.join(root, name)
            if not os.path.isfile(local):
                continue  # sockets, dangling symlinks...
            relative = os.path.relpath(local, directory).replace(os.sep, "/")
            files.append((relative, local))
    return files


def _raise_walk_error(exc: OSError) -> None:
    raise InvalidArgument(f"cannot read directory {exc.filename}: {exc.strerror}")


def _upload_directory(ctx: CliContext, args) -> int:
    import time

    from lakefuse.graveler.model import Entry

    uri = ref_arg(args.uri, allow_path=True)
    source = args.source
    if source == STDIO:
        raise InvalidArgument("--recursive uploads a directory, not stdin")
    if not os.path.isdir(source):
        raise InvalidArgument(f"{source}: not a directory")
    prefix = uri.path or ""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    files = _local_files(source)
    if not files:
        raise InvalidArgument(f"{source}: no files to upload")
    for relative, local in files:
        _check_key(prefix + relative)
        if not os.access(local, os.R_OK):
            raise InvalidArgument(f"{local}: not readable")
    catalog = ctx.catalog
    require_branch(catalog, uri.repository, uri.ref)
    staged = []
    total = 0
    for relative, local in files:
        try:
            handle = open(local, "rb")
        except OSError as exc:
            raise InvalidArgument(f"cannot read {local!r}: {exc.strerror or exc}") from None
        with handle:
            address, size, checksum = catalog.write_data(uri.repository, handle)
        path = prefix + relative
        staged.append((path, Entry(physical_address=address, size=size, mtime=int(time.time()), checksum=checksum,
                                   content_type=_content_type(path, args.content_type) or "application/octet-stream")))
        total += size
    catalog.stage_entries(uri.repository, uri.ref, staged)
    out = ctx.out
    for path, entry in staged:
        out.write(f"Uploaded lakefs://{uri.repository}/{uri.ref}/{path} ({human_size(entry.size)})\n")
    out.write(f"{len(staged)} objects, {human_size(total)} staged on branch '{uri.ref}'\n")
    return 0


def cmd_rm(ctx: CliContext, args) -> int:
    if args.recursive:
        uri = ref_arg(args.uri, allow_path=True)
        catalog = ctx.catalog
        require_branch(catalog, uri.repository, uri.ref)
        paths = [item.path for item in catalog.iter_objects(uri.repository, uri.ref, uri.path or "")]
        if not paths:
            raise ObjectNotFound(f"no objects under {args.uri}")
        catalog.stage_entries(uri.repository, uri.ref, [(path, None) for path in paths])
        ctx.out.write(f"Removed {len(paths)} objects under {args.uri}\n")
        return 0
    uri = object_arg(args.uri)
    catalog = ctx.catalog
    require_branch(catalog, uri.repository, uri.ref)
    if not catalog.delete_object(uri.repository, uri.ref, uri.path):
        raise ObjectNotFound(f"object {uri.path!r} not found in branch {uri.ref!r} of repository {uri.repository!r}")
    ctx.out.write(f"Removed {args.uri}\n")
    return 0


# --------------------------------------------------------------------------------------------
# downloading


def cmd_download(ctx: CliContext, args) -> int:
    if args.recursive:
        return _download_prefix(ctx, args)
    uri = object_arg(args.uri)
    name = uri.path.rstrip("/").rsplit("/", 1)[-1]
    dest = args.dest
    if dest == STDIO:
        catalog = ctx.catalog
        entry = catalog.stat(uri.repository, uri.ref, uri.path)
        out = _stdout_binary()
        _stream_entry(catalog, uri.repository, entry, out.write)
        out.flush()
        return 0
    target = dest or name
    if target.endswith(("/", os.sep)) and not os.path.isdir(target):
        raise InvalidArgument(f"{target}: directory does not exist")
    if os.path.isdir(target):
        target = os.path.join(target, name)
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        raise InvalidArgument(f"{target}: directory {parent} does not exist")
    entry = _download_one(ctx.catalog, uri.repository, uri.ref, uri.path, target)
    ctx.out.write(f"Downloaded {args.uri} to {target} ({human_size(entry.size)})\n")
    return 0


def _download_one(catalog, repository: str, ref: str, path: str, target: str):
    import secrets
    import stat

    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):  # /dev/null, a FIFO...: write into it, never replace it
        entry = catalog.stat(repository, ref, path)
        with open(target, "wb") as out:
            _stream_entry(catalog, repository, entry, out.write)
        return entry
    directory, name = os.path.split(os.path.abspath(target))
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.lakefuse-part")
    try:
        entry = catalog.download(repository, ref, path, temporary)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return entry


def _download_prefix(ctx: CliContext, args) -> int:
    uri = ref_arg(args.uri, allow_path=True)
    if args.dest == STDIO:
        raise InvalidArgument("--recursive downloads into a directory, not stdout")
    dest = args.dest or "."
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise InvalidArgument(f"{dest}: not a directory")
    prefix = uri.path or ""
    base = prefix[: prefix.rfind("/") + 1]
    catalog = ctx.catalog
    items = [item for item in catalog.iter_objects(uri.repository, uri.ref, prefix)]
    if not items:
        raise ObjectNotFound(f"no objects under {args.uri}")
    plan = []
    for item in items:
        relative = item.path[len(base):]
        parts = relative.split("/")
        if relative.endswith("/"):
            continue  # a directory marker object
        if any(part in ("", ".", "..") for part in parts):
            raise InvalidArgument(f"object path {item.path!r} cannot be a local file name (empty, '.' or '..' part)")
        plan.append((item.path, os.path.join(dest, *parts)))
    total = 0
    for path, target in plan:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        entry = _download_one(catalog, uri.repository, uri.ref, path, target)
        total += entry.size
        ctx.out.write(f"Downloaded {path} to {target}\n")
    ctx.out.write(f"{len(plan)} objects, {human_size(total)} downloaded to {dest}\n")
    return 0
