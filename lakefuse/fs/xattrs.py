"""Extended attributes: ``Xattrs`` serves getxattr, listxattr, setxattr and removexattr.

Owns the mapping of xattr names: ``user.<k>`` is the object's user metadata ``k`` (settable on
branches; the mount's own keys are hidden); ``lakefuse.checksum``, ``lakefuse.physical_address``,
``lakefuse.content_type`` (settable) and ``lakefuse.size`` describe the object and are readable
by name but not listed, so copy tools (mv across branches, cp -a, rsync -X) do not try to copy
them (as Ceph does with its virtual xattrs).  Other namespaces (security.*, system.*,
trusted.*) get ENOTSUP, which tools remember per filesystem.
"""

from __future__ import annotations

import errno

from lakefuse.fs.attributes import INTERNAL_METADATA
from lakefuse.fs.inodes import Inodes
from lakefuse.fs.metadata import ENOATTR, Metadata
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.replies import WouldBlock
from lakefuse.fs.tree import decode_name
from lakefuse.fs.uploads import Uploader
from lakefuse.graveler.model import Entry

XATTR_USER = "user."
XATTR_OBJECT_NAMESPACE = "lakefuse."
XATTR_OBJECT = ("lakefuse.checksum", "lakefuse.physical_address", "lakefuse.content_type", "lakefuse.size")
#: the kernel's namespaces of attributes this filesystem has none in: every request about a
#: name in them is answered ENOTSUP (``_namespace_unsupported``), so an adapter may answer
#: them without asking (the kernel asks for ``security.capability`` before each write(2) into a
#: file it writes itself)
UNSUPPORTED_NAMESPACES = ("security.", "system.", "trusted.")


def _namespace_supported(name: str) -> bool:
    return name.startswith(XATTR_USER) or name.startswith(XATTR_OBJECT_NAMESPACE)


def _namespace_unsupported(name: str) -> OSError:
    """security.*, system.* (ACLs), trusted.*: not supported here, said with ENOTSUP rather than
    "no such attribute" (ENODATA).  Tools remember ENOTSUP per filesystem: ``ls -l`` then stops
    asking for every file's SELinux label and ACL (two round trips per entry otherwise)."""
    return OSError(errno.ENOTSUP, f"extended attribute namespace of {name!r} not supported")


def _has_metadata(node: Node) -> bool:
    """Whether ``node`` is an object's file or directory (not a ref, a repository or a control file)."""
    return node.kind in (NodeKind.FILE, NodeKind.DIR) and node.path != ""


def _text(value: bytes, what: str) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise OSError(errno.EINVAL, f"{what} must be UTF-8 text") from None


class Xattrs:
    def __init__(self, inodes: Inodes, metadata: Metadata, uploader: Uploader):
        self._inodes = inodes
        self._metadata = metadata
        self._uploader = uploader

    def getxattr(self, node: Node, name: bytes | str, blocking: bool = True) -> bytes:
        name = decode_name(name)
        if not _namespace_supported(name):
            raise _namespace_unsupported(name)
        entry = self._entry(node, blocking)
        if entry is None:
            raise OSError(ENOATTR, name)
        if name.startswith(XATTR_USER):
            key = name[len(XATTR_USER):]
            metadata = self._current_metadata(node, entry)
            if key in INTERNAL_METADATA or key not in metadata:
                raise OSError(ENOATTR, name)
            return metadata[key].encode("utf-8")
        if node.kind is NodeKind.FILE and name in XATTR_OBJECT:
            of = node.open_file
            if name == "lakefuse.content_type":
                ctype = of.content_type if of is not None and of.content_type else entry.content_type
                return ctype.encode("utf-8")
            if of is not None and of.dirty and of.spool is not None and of.spool.kernel_writes \
                    and of.kernel_closed >= of.kernel_writers:
                # written by the kernel and closed: stored as its release stores it (the
                # kernel sends RELEASE as close(2) returns; this may come first)
                if not blocking:
                    raise WouldBlock
                self._uploader.upload(of)
                entry = node.stat.entry if node.stat is not None else entry
            if of is not None and of.dirty:
                raise OSError(ENOATTR, f"{name}: not known until the file is uploaded (fsync or close)")
            value = {"lakefuse.checksum": entry.checksum, "lakefuse.physical_address": entry.physical_address,
                     "lakefuse.size": str(entry.size)}[name]
            return value.encode("utf-8")
        raise OSError(ENOATTR, name)

    def listxattr(self, node: Node, blocking: bool = True) -> list[bytes]:
        entry = self._entry(node, blocking)
        if entry is None:
            return []
        # only user.*: the virtual lakefuse.* attributes are readable by name, not listed
        names = [XATTR_USER + key for key in sorted(self._current_metadata(node, entry)) if key not in INTERNAL_METADATA]
        return [n.encode("utf-8") for n in names]

    def setxattr(self, node: Node, name: bytes | str, value: bytes) -> None:
        name = decode_name(name)
        if name.startswith(XATTR_USER):
            key = name[len(XATTR_USER):]
            if not key or key in INTERNAL_METADATA:
                raise OSError(errno.EPERM, f"{name} is reserved")
            text = _text(value, "user metadata values")
            tree = self._inodes.writable_tree(node)
            if not _has_metadata(node):
                raise OSError(errno.ENOTSUP, "no metadata here")
            self._metadata.change(node, tree, set_meta={key: text})
            return
        if name == "lakefuse.content_type" and node.kind is NodeKind.FILE:
            tree = self._inodes.writable_tree(node)
            self._metadata.change(node, tree, content_type=_text(value, "content type"))
            return
        if name in XATTR_OBJECT:
            raise OSError(errno.EPERM, f"{name} is read-only")
        if not _namespace_supported(name):
            raise _namespace_unsupported(name)
        raise OSError(errno.ENOTSUP, f"{name!r}: no such object property")

    def removexattr(self, node: Node, name: bytes | str) -> None:
        name = decode_name(name)
        if not name.startswith(XATTR_USER):
            if name in XATTR_OBJECT:
                raise OSError(errno.EPERM, f"{name} is read-only")
            if not _namespace_supported(name):
                raise _namespace_unsupported(name)
            raise OSError(ENOATTR, name)
        key = name[len(XATTR_USER):]
        if key in INTERNAL_METADATA:
            raise OSError(ENOATTR, name)
        tree = self._inodes.writable_tree(node)
        if not _has_metadata(node):
            raise OSError(ENOATTR, name)
        self._metadata.change(node, tree, remove_meta=key)

    def _entry(self, node: Node, blocking: bool = True) -> Entry | None:
        """The entry whose metadata the xattrs of ``node`` show (a file being written: what
        its upload will store)."""
        if not _has_metadata(node):
            return None
        self._inodes.refresh(node, blocking)
        of = node.open_file
        if of is not None and of.entry is not None:
            return of.entry
        entry = node.stat.entry if node.stat is not None else None
        if entry is None and node.kind is NodeKind.FILE and of is not None:
            return Entry("", 0, 0, "", of.content_type or "application/octet-stream", dict(of.metadata))
        return entry

    @staticmethod
    def _current_metadata(node: Node, entry: Entry) -> dict[str, str]:
        of = node.open_file
        if of is not None and node.kind is NodeKind.FILE:
            return of.metadata
        return dict(entry.metadata)
