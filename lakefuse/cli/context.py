"""What every CLI command shares: ``CliContext`` (configuration and the ``App``, opened on first
use and closed once at the end) and the parsing of command arguments that argparse cannot do
alone (``lakefs://`` URIs of the right shape, ``--meta k=v``, the default committer).

Every parser here raises ``InvalidArgument`` (exit 2) before anything is touched, so a command
validates all of its arguments first and only then opens the ``App``.
"""

from __future__ import annotations

import argparse
import sys

from lakefuse.errors import InvalidArgument, ReadOnly
from lakefuse.uri import LakefsURI, parse_uri


class CliContext:
    """Configuration and composition root of one CLI invocation.  ``app()`` builds the ``App``
    on first call (commands that fail validation never open the database); ``close()``
    closes it."""

    def __init__(self, config_path: str | None = None):
        self.config_path = config_path
        self._config = None
        self._app = None

    def config(self):
        if self._config is None:
            from lakefuse.config import load_config

            self._config = load_config(self.config_path)
        return self._config

    def app(self):
        if self._app is None:
            from lakefuse.app import App

            self._app = App.from_config(self.config())
        return self._app

    @property
    def catalog(self):
        return self.app().catalog

    def app_factory(self):
        """For delegated command modules that take an ``app_factory`` callable."""
        return self.app()

    @property
    def out(self):
        return sys.stdout

    def close(self) -> None:
        app, self._app = self._app, None
        if app is not None:
            app.close()


# --------------------------------------------------------------------------------------------
# lakefs:// arguments


def _checked(uri: LakefsURI) -> LakefsURI:
    from lakefuse.graveler.refexpr import validate_repository_name

    validate_repository_name(uri.repository)
    return uri


def repository_arg(text: str) -> str:
    """``lakefs://repo`` -> ``repo``."""
    uri = parse_uri(text)
    if uri.ref is not None:
        raise InvalidArgument(f"{text}: expected a repository URI (lakefs://<repo>)")
    return _checked(uri).repository


def ref_arg(text: str, *, allow_path: bool = False) -> LakefsURI:
    """``lakefs://repo/ref`` (with ``allow_path``, also ``lakefs://repo/ref/path``)."""
    uri = parse_uri(text)
    if not uri.ref:
        raise InvalidArgument(f"{text}: a ref is required (lakefs://<repo>/<ref>)")
    if uri.path and not allow_path:
        raise InvalidArgument(f"{text}: unexpected path {uri.path!r} (expected lakefs://<repo>/<ref>)")
    return _checked(uri)


def object_arg(text: str) -> LakefsURI:
    """``lakefs://repo/ref/path`` with a non-empty path."""
    uri = ref_arg(text, allow_path=True)
    if not uri.path:
        raise InvalidArgument(f"{text}: an object path is required (lakefs://<repo>/<ref>/<path>)")
    return uri


def same_repository(first: LakefsURI, second: LakefsURI) -> str:
    if first.repository != second.repository:
        raise InvalidArgument(
            f"{first} and {second} are in different repositories ({first.repository!r}, {second.repository!r})"
        )
    return first.repository


def ref_in_repository(text: str, repository: str) -> str:
    """A ref given either plainly (``main~1``, a commit ID) or as ``lakefs://repo/ref``."""
    if text.startswith("lakefs://"):
        uri = ref_arg(text)
        if uri.repository != repository:
            raise InvalidArgument(f"{text}: not in repository {repository!r}")
        return uri.ref
    if not text or "/" in text:
        raise InvalidArgument(f"invalid ref {text!r}: expected a ref (main, v1, main~2, a commit ID) or lakefs://<repo>/<ref>")
    return text


def validate_branch_name(name: str) -> str:
    from lakefuse.graveler.refexpr import validate_ref_name

    return validate_ref_name(name, "branch")


def validate_tag_name(name: str) -> str:
    from lakefuse.graveler.refexpr import validate_ref_name

    return validate_ref_name(name, "tag")


def require_branch(catalog, repository: str, ref: str):
    """The resolved ``ref``, which must be a branch: a tag or commit is ``ReadOnly``."""
    resolved = catalog.resolve(repository, ref)
    if not resolved.writable:
        raise ReadOnly(f"{ref!r} is {resolved.kind.with_article} of repository {repository!r}, "
                       "not a branch: read-only")
    return resolved


# --------------------------------------------------------------------------------------------
# other arguments


def meta_pair(text: str) -> tuple[str, str]:
    """argparse type of ``--meta k=v``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def metadata_of(pairs: list[tuple[str, str]] | None) -> dict[str, str]:
    result: dict[str, str] = {}
    for key, value in pairs or ():
        if key in result:
            raise InvalidArgument(f"--meta {key!r} given more than once")
        result[key] = value
    return result


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


COMMITTER_HELP = "committer (default: $LAKEFUSE_USER, else user.name of the configuration, else the OS user)"


def default_committer(ctx: CliContext) -> str:
    """The committer when ``--committer`` is not given: ``lakefuse.config.committer_name``
    (``$LAKEFUSE_USER``, else ``user.name`` of the configuration, else the OS user), the same
    rule a mount commits by."""
    from lakefuse.config import committer_name

    return committer_name(ctx.config())


def committer_of(ctx: CliContext, args) -> str:
    committer = getattr(args, "committer", None)
    if committer is not None and not committer.strip():
        raise InvalidArgument("--committer must not be empty")
    return committer or default_committer(ctx)
