"""Configuration: where the embedded default lives and what the YAML config file may say.

Precedence, lowest to highest: built-in defaults, the YAML file
(``$LAKEFUSE_CONFIG`` or ``$LAKEFUSE_HOME/config.yaml``), environment variables.

Example ``config.yaml``::

    database:
      url: postgresql+psycopg://lakefuse@127.0.0.1:5432/lakefuse
    storage:
      s3:
        endpoint_url: http://127.0.0.1:9000
        region: us-east-1
        access_key_id: ...
        secret_access_key: ...
    cache:
      dir: /var/cache/lakefuse
      disk_bytes: 10GiB
      ram_bytes: 1GiB
      scan_bytes: 128MiB    # of ram_bytes, what walks may keep (the default)
    committed:
      range_min_bytes: 256KiB
      range_max_bytes: 4MiB
      range_raggedness: 4096
    user:
      name: alice

Environment variables: ``LAKEFUSE_HOME``, ``LAKEFUSE_CONFIG``, ``LAKEFUSE_DATABASE_URL``,
``LAKEFUSE_CACHE_DIR``, ``LAKEFUSE_CACHE_DISK_BYTES``, ``LAKEFUSE_CACHE_RAM_BYTES``,
``LAKEFUSE_CACHE_SCAN_BYTES``,
``LAKEFUSE_S3_ENDPOINT_URL``, ``LAKEFUSE_S3_REGION``, ``LAKEFUSE_USER``; S3 credentials also
come from the standard AWS chain (``AWS_ACCESS_KEY_ID``, profiles, instance roles).

The committer of every commit lakefuse makes on a user's behalf (the CLI's and a mount's alike)
is ``committer_name(config)``: ``$LAKEFUSE_USER``, else ``user.name`` of the config file, else
the OS user name (``getpass.getuser()``, or ``uid N`` where there is none).  The CLI's
``--committer`` overrides it for one command.
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from lakefuse.errors import ConfigError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)(B?)\s*$", re.IGNORECASE)


def parse_size(value, what: str = "size") -> int:
    """Parse ``1048576``, ``"512KiB"``, ``"10GB"``, ``"4M"`` into bytes.

    ``KB``/``MB``/``GB``/``TB`` are decimal; ``K``/``M``/``G``/``T`` and ``KiB``... binary."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{what}: size must not be negative, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"{what}: cannot parse size {value!r} (examples: 1048576, 512KiB, 10GB)")
    number, unit, binary, b = m.groups()
    base = 1000 if (unit and b and not binary) else 1024
    power = " KMGT".index(unit.upper()) if unit else 0
    return int(float(number) * base**power)


@dataclass(frozen=True)
class S3Config:
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    max_attempts: int = 8


#: what walks may keep of the RAM cache unless ``cache.scan_bytes`` says otherwise: a walk of a
#: million objects reads about 370 MB of ranges, and keeping them all makes only a second walk
#: of the same ranges faster (a first one reads each range once: see ``CommittedManager._peek``)
DEFAULT_SCAN_BYTES = 128 * 1024**2


@dataclass(frozen=True)
class CacheConfig:
    dir: Path
    disk_bytes: int = 10 * 1024**3
    ram_bytes: int = 1024**3
    #: how much of ``ram_bytes`` the ranges walks read may keep (None: ``DEFAULT_SCAN_BYTES``,
    #: or all of ``ram_bytes`` if less; see ``scan_limit`` and ``lakefuse.cache.ram.RamCache``)
    scan_bytes: int | None = None

    @property
    def scan_limit(self) -> int:
        """What the RAM cache lets walks keep."""
        return self.scan_bytes if self.scan_bytes is not None else min(DEFAULT_SCAN_BYTES, self.ram_bytes)


@dataclass(frozen=True)
class CommittedConfig:
    """Range splitting: see README "Range sizes" for why these defaults."""

    range_min_bytes: int = 256 * 1024
    range_max_bytes: int = 4 * 1024 * 1024
    range_raggedness: int = 4096  # split after a key whose hash % raggedness == 0


@dataclass(frozen=True)
class Config:
    home: Path
    database_url: str
    cache: CacheConfig
    s3: S3Config = field(default_factory=S3Config)
    committed: CommittedConfig = field(default_factory=CommittedConfig)
    #: ``$LAKEFUSE_USER`` or ``user.name`` of the file; None: the OS user (see committer_name)
    user_name: str | None = None

    @property
    def storage_root(self) -> Path:
        """Where default local storage namespaces of new repositories are created."""
        return self.home / "storage"


def _optional_size(value, what: str) -> int | None:
    return None if value is None else parse_size(value, what)


def check_cache(cache: CacheConfig) -> None:
    """ConfigError unless ``cache.scan_bytes`` (when set) is at most ``cache.ram_bytes``."""
    if cache.scan_bytes is not None and cache.scan_bytes > cache.ram_bytes:
        raise ConfigError(f"config: cache.scan_bytes ({cache.scan_bytes}) must not exceed cache.ram_bytes "
                          f"({cache.ram_bytes}): it is the part of the RAM cache walks may keep")


def default_home() -> Path:
    env = os.environ.get("LAKEFUSE_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "share" / "lakefuse"


def _section(data: dict, name: str) -> dict:
    value = data.get(name) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"config: '{name}' must be a mapping, got {type(value).__name__}")
    return value


def load_config(path: str | os.PathLike | None = None, environ=None) -> Config:
    """Build the effective configuration (defaults < YAML file < environment)."""
    env = os.environ if environ is None else environ
    home = Path(env["LAKEFUSE_HOME"]).expanduser() if env.get("LAKEFUSE_HOME") else default_home()
    config_path = Path(path or env.get("LAKEFUSE_CONFIG") or home / "config.yaml")
    data: dict = {}
    if config_path.exists():
        import yaml

        try:
            data = yaml.safe_load(config_path.read_text()) or {}
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "syntax error"
            raise ConfigError(f"config {config_path}: not valid YAML: {first}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config {config_path}: top level must be a mapping")
        known = {"database", "storage", "cache", "committed", "home", "user"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"config {config_path}: unknown section(s): {', '.join(unknown)}")
    elif path or env.get("LAKEFUSE_CONFIG"):
        raise ConfigError(f"config file {config_path} does not exist")

    if data.get("home") and not env.get("LAKEFUSE_HOME"):
        home = Path(str(data["home"])).expanduser()

    database = _section(data, "database")
    db_url = env.get("LAKEFUSE_DATABASE_URL") or database.get("url") or f"sqlite:///{home / 'lakefuse.db'}"

    s3 = _section(_section(data, "storage"), "s3")
    s3_cfg = S3Config(
        endpoint_url=env.get("LAKEFUSE_S3_ENDPOINT_URL") or s3.get("endpoint_url"),
        region=env.get("LAKEFUSE_S3_REGION") or s3.get("region"),
        access_key_id=s3.get("access_key_id"),
        secret_access_key=s3.get("secret_access_key"),
        max_attempts=int(s3.get("max_attempts", 8)),
    )

    cache = _section(data, "cache")
    cache_cfg = CacheConfig(
        dir=Path(env.get("LAKEFUSE_CACHE_DIR") or cache.get("dir") or home / "cache").expanduser(),
        disk_bytes=parse_size(env.get("LAKEFUSE_CACHE_DISK_BYTES") or cache.get("disk_bytes", "10GiB"), "cache.disk_bytes"),
        ram_bytes=parse_size(env.get("LAKEFUSE_CACHE_RAM_BYTES") or cache.get("ram_bytes", "1GiB"), "cache.ram_bytes"),
        scan_bytes=_optional_size(env.get("LAKEFUSE_CACHE_SCAN_BYTES") or cache.get("scan_bytes"), "cache.scan_bytes"),
    )
    check_cache(cache_cfg)

    committed = _section(data, "committed")
    defaults = CommittedConfig()
    committed_cfg = replace(
        defaults,
        range_min_bytes=parse_size(committed.get("range_min_bytes", defaults.range_min_bytes), "committed.range_min_bytes"),
        range_max_bytes=parse_size(committed.get("range_max_bytes", defaults.range_max_bytes), "committed.range_max_bytes"),
        range_raggedness=int(committed.get("range_raggedness", defaults.range_raggedness)),
    )
    if committed_cfg.range_max_bytes < committed_cfg.range_min_bytes:
        raise ConfigError("config: committed.range_max_bytes must be >= committed.range_min_bytes")
    if committed_cfg.range_raggedness < 1:
        raise ConfigError("config: committed.range_raggedness must be >= 1")

    return Config(home=home, database_url=str(db_url), cache=cache_cfg, s3=s3_cfg, committed=committed_cfg,
                  user_name=_user_name(_section(data, "user"), env))


USER_ENV = "LAKEFUSE_USER"


def _user_name(user: dict, env) -> str | None:
    name = user.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ConfigError(f"config: user.name must be a non-empty string, got {name!r}")
    from_env = (env.get(USER_ENV) or "").strip()
    return from_env or (name.strip() if name is not None else None)


def os_user_name() -> str:
    """The OS user name (``getpass.getuser()``), or ``uid N`` where there is none."""
    try:
        name = getpass.getuser()
    except Exception:  # noqa: BLE001 - no LOGNAME/USER and no passwd entry (containers)
        name = ""
    return name or f"uid {os.getuid()}"


def committer_name(config: Config | None = None, environ=None) -> str:
    """Who commits, by the one rule of the CLI and the mount: ``$LAKEFUSE_USER``, else
    ``user.name`` of the configuration, else the OS user name (``uid N`` if there is none).

    ``config`` carries the first two as loaded by ``load_config``; ``$LAKEFUSE_USER`` is read
    again from ``environ`` (default ``os.environ``) so the variable wins even over a
    configuration loaded before it was set."""
    env = os.environ if environ is None else environ
    from_env = (env.get(USER_ENV) or "").strip()
    if from_env:
        return from_env
    if config is not None and config.user_name:
        return config.user_name
    return os_user_name()
