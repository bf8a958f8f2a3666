"""The exception tree: every user-visible error carries an errno and a distinct exit code."""

from __future__ import annotations

import errno

import lakefuse.errors as errors


def _leaf_classes():
    out = []
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, errors.LakefuseError):
            out.append(obj)
    return out


def test_every_error_is_a_lakefuse_error_with_errno_and_exit_code():
    for cls in _leaf_classes():
        assert isinstance(cls.errno, int) and cls.errno > 0, cls
        assert isinstance(cls.exit_code, int) and 1 <= cls.exit_code < 64, cls


def test_kinds_of_error_have_distinct_exit_codes():
    kinds = [errors.InvalidArgument, errors.NotFound, errors.AlreadyExists, errors.Conflict,
             errors.NoChanges, errors.DirtyBranch, errors.HookFailed, errors.StorageError,
             errors.ReadOnly, errors.CorruptedData]
    codes = [k.exit_code for k in kinds]
    assert len(set(codes)) == len(codes)
    assert 1 not in codes  # 1 is reserved for unexpected errors


def test_errno_mapping_matches_posix_meaning():
    assert errors.ObjectNotFound().errno == errno.ENOENT
    assert errors.ReadOnly().errno == errno.EROFS
    assert errors.NameTooLong().errno == errno.ENAMETOOLONG
    assert errors.AlreadyExists().errno == errno.EEXIST


def test_default_message_and_details():
    e = errors.RefNotFound()
    assert str(e) == "Reference not found."
    e = errors.MergeConflict("2 conflicts", conflicts=["a", "b"], repo="r")
    assert e.conflicts == ["a", "b"] and e.details == {"repo": "r"} and e.message == "2 conflicts"
