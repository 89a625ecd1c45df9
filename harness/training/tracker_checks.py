"""The trackers' settings, checked before any work (:func:`harness.training.trackers.available` calls these): MLflow's
tracking URI (:func:`check_tracking_uri`) and W&B's mode, API key and server (:func:`check_wandb`).

A tracker that fails as the run starts is turned off and the run goes on untracked (exit status 0), so every setting
that would make it fail is refused here, before the run folder is made, naming the variable, its value, the rule and
the fix. Only what can be told cheaply and for certain is refused: a database URL SQLAlchemy cannot read or whose
driver is missing, a server that does not answer within :data:`harness.network.TIMEOUT` seconds, a W&B mode wandb
does not know, an online W&B run without an API key. What only the service can tell (a wrong password, a key W&B
does not accept) stays the service's to report.
"""

from __future__ import annotations

import configparser
import os
import re
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse, urlsplit

from harness.folder_paths import harness_folder_kind
from harness.io import quote
from harness.network import TIMEOUT, no_listener, unreachable

#: the URI schemes of MLflow's tracking stores (a plain path is a file store too)
MLFLOW_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks", "databricks-uc")
#: MLflow's database stores (SQLAlchemy URLs, ``scheme[+driver]://...``) and the port each server listens on unless
#: the URL names one
DATABASES = {"sqlite": None, "postgresql": 5432, "mysql": 3306, "mssql": 1433}
#: MLflow's Databricks stores: the scheme alone (``databricks``) or with a profile (``databricks://profile``)
DATABRICKS = ("databricks", "databricks-uc")
#: the local MLflow store to advise: a database file (MLflow 3 refuses its file store unless
#: ``MLFLOW_ALLOW_FILE_STORE=true``; a database works with every MLflow version)
LOCAL_STORE = "sqlite:///mlflow.db"
#: the pip package of each database driver module SQLAlchemy imports (the module's name where they are the same)
DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient"}


def mlflow_version() -> Optional[str]:
    """The installed MLflow's version (read from its package metadata, MLflow not imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlflow")
    except PackageNotFoundError:
        return None


def _default_store() -> Optional[str]:
    """The store MLflow uses when ``MLFLOW_TRACKING_URI`` is unset (MLflow >= 3: ``sqlite:///mlflow.db`` in the
    working folder, its artefacts beside it in ``mlruns/``), from ``mlflow.get_tracking_uri``; None without MLflow."""
    if mlflow_version() is None:
        return None
    import mlflow

    return mlflow.get_tracking_uri()


def _file_store_refused() -> Optional[str]:
    """The installed MLflow's version when it refuses a file store as the run starts (MLflow >= 3, without
    ``MLFLOW_ALLOW_FILE_STORE`` set to true or 1), else None."""
    found = mlflow_version()
    allowed = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1")
    major = re.match(r"\d+", found or "")
    return found if major and int(major.group()) >= 3 and not allowed else None


def _local_store_path(uri: str, scheme: str) -> Optional[Path]:
    """The file or folder of a local store (a path, a ``file:`` URI, an ``sqlite:`` database file), else None."""
    if scheme == "sqlite":
        path = unquote(urlparse(uri).path)[1:]  # sqlite:///rel.db: rel.db; sqlite:////abs.db: /abs.db
        return Path(path).expanduser().resolve() if path and path != ":memory:" else None
    if scheme in ("", "file") or len(scheme) == 1:  # a Windows drive letter is a path too
        return Path(unquote(urlparse(uri).path) if scheme == "file" else uri).expanduser().resolve()
    return None


def _masked(uri: str) -> str:
    """``uri`` with the password of its ``user:password@`` part written ``***`` (messages never show it)."""
    return re.sub(r"^([\w+.-]+://[^:/@]*:)[^@/]*@", r"\1***@", uri)


def _check_database(uri: str, scheme: str, shown: str, key: str) -> None:
    """A database URL (``sqlite:``, ``postgresql:``, ``mysql:``, ``mssql:``) as MLflow's SQLAlchemy store opens it:
    readable by SQLAlchemy (``sqlite:///relative.db``, ``sqlite:////absolute.db``), its driver installed, and (a
    server) something listening at its host and port. Nothing is checked without SQLAlchemy (MLflow brings it).

    Raises:
        ValueError: each of these, naming the value and the fix.
    """
    try:
        from sqlalchemy.engine import make_url
    except ImportError:
        return
    form = (
        "sqlite:///relative/path.db or sqlite:////absolute/path.db"
        if scheme == "sqlite"
        else (f"{scheme}://user:password@host:port/database")
    )
    try:
        url = make_url(uri)
        dialect = url.get_dialect()
    except Exception as e:  # noqa: BLE001 -- ArgumentError (no URL), NoSuchModuleError (no such driver)
        raise ValueError(
            f"{shown} is no database URL SQLAlchemy can open ({type(e).__name__}: {e}), and "
            f"MLflow would fail as the run starts and the run go on untracked: write it as {form} (e.g. "
            f"MLFLOW_TRACKING_URI={LOCAL_STORE}), or leave mlflow out of {key}"
        ) from None
    try:
        (getattr(dialect, "import_dbapi", None) or dialect.dbapi)()  # SQLAlchemy 2: import_dbapi; 1.4: dbapi
    except ImportError as e:
        package = DRIVER_PACKAGES.get(e.name or "", e.name or "the driver")
        raise ValueError(
            f"{shown} is opened with SQLAlchemy's {url.get_backend_name()}+{url.get_driver_name()}"
            f" driver, whose module is not installed here ({type(e).__name__}: {e}), and MLflow would fail as the "
            f"run starts and the run go on untracked: pip install {package}, or name an installed driver "
            f"({url.get_backend_name()}+DRIVER://...), or use a local database (MLFLOW_TRACKING_URI={LOCAL_STORE}), "
            f"or leave mlflow out of {key}"
        ) from None
    port = url.port or DATABASES.get(scheme)
    reason = no_listener(url.host, port) if url.host and port and not url.host.startswith("/") else None
    if reason:
        raise ValueError(
            f"{shown}: no database server answers at {url.host}:{port} within {TIMEOUT:g} s "
            f"({reason}), and MLflow would fail as the run starts and the run go on untracked: start the server, "
            f"correct MLFLOW_TRACKING_URI, use a local database (MLFLOW_TRACKING_URI={LOCAL_STORE}), or leave "
            f"mlflow out of {key}"
        )


def _check_databricks(uri: str, shown: str, key: str) -> None:
    """MLflow's Databricks store: a workspace to log to, named by ``DATABRICKS_HOST`` or by the profile
    (``databricks://PROFILE``, ``DATABRICKS_CONFIG_PROFILE``, else ``DEFAULT``) of the Databricks CLI's config file
    (``DATABRICKS_CONFIG_FILE``, else ``~/.databrickscfg``). Inside Databricks (``DATABRICKS_RUNTIME_VERSION``) and
    with a secret scope (``databricks://scope:prefix``) the workspace is not checked; the credentials never are.

    Raises:
        ValueError: no workspace named anywhere (the message names where to put it).
    """
    profile = urlparse(uri).netloc if "://" in uri else ""
    if os.environ.get("DATABRICKS_HOST") or os.environ.get("DATABRICKS_RUNTIME_VERSION") or ":" in profile:
        return
    profile = profile or os.environ.get("DATABRICKS_CONFIG_PROFILE") or "DEFAULT"
    config = Path(os.environ.get("DATABRICKS_CONFIG_FILE") or "~/.databrickscfg").expanduser()
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(config)
    except (configparser.Error, OSError, UnicodeDecodeError):
        return  # a file the Databricks SDK reads its own way: its own message
    if parser.defaults().get("host") if profile == "DEFAULT" else parser.get(profile, "host", fallback=None):
        return
    raise ValueError(
        f"{shown} is MLflow's Databricks store, which logs to a Databricks workspace, and none "
        f"is named: DATABRICKS_HOST is unset and {config} has no [{profile}] profile with a host, so MLflow would "
        f"fail as the run starts and the run go on untracked: run databricks configure (or databricks auth login) "
        f"to write the profile, or set DATABRICKS_HOST and DATABRICKS_TOKEN; or use a local database "
        f"(MLFLOW_TRACKING_URI={LOCAL_STORE}); or leave mlflow out of {key}"
    )


#: the first 16 bytes of every SQLite database file (https://www.sqlite.org/fileformat.html, section 1.3.1)
SQLITE_HEADER = b"SQLite format 3\x00"


def _harness_folder_around(path: Path) -> Optional[str]:
    """How a message names the harness folder (a run, a sweep, an ensemble, a report, a few-shot result, an export,
    an experiment's: :func:`harness.folder_paths.harness_folder_kind`) that is ``path`` or holds it (``"run folder
    runs/a (it holds run.json)"``), else None: a tracker's files written there would mix with the harness's own."""
    for folder in (path, *path.parents):
        kind = harness_folder_kind(folder)
        if kind is not None:
            return f"{kind.kind} folder {folder} (it holds {kind.holds})"
    return None


def _check_sqlite_file(path: Path, shown: str, key: str) -> None:
    """An ``sqlite:`` store's file, if it exists, is an SQLite database (:data:`SQLITE_HEADER`; an empty file is a new
    one): MLflow would otherwise fail as the run starts and the run would go on untracked.

    Raises:
        ValueError: a folder, or a file of another kind, naming MLFLOW_TRACKING_URI, the file and the fix.
    """
    if path.is_dir():
        kind = "a folder"
    elif path.is_file() and path.stat().st_size:
        with open(path, "rb") as f:
            if f.read(len(SQLITE_HEADER)) == SQLITE_HEADER:
                return
        kind = "a file that is not an SQLite database"
    else:
        return
    raise ValueError(
        f"{shown} names {path}, which is {kind}: MLflow would fail as the run starts and the run "
        f"would go on untracked; give a new file name (e.g. MLFLOW_TRACKING_URI=sqlite:///{path.parent / 'mlflow.db'}"
        f"), move {path} away, or leave mlflow out of {key}"
    )


def check_wandb_dir(key: str = "--log-with") -> None:
    """``WANDB_DIR``, where W&B writes its run files (``<WANDB_DIR>/wandb/``), checked as every other location: an
    existing, writable folder (W&B falls back to a temporary folder without a word otherwise) outside any harness
    output folder (:func:`_harness_folder_around`). Unset, W&B writes in the working folder.

    Raises:
        ValueError: naming WANDB_DIR, its value, the rule and the fix.
    """
    given = os.environ.get("WANDB_DIR")
    if not given:
        return
    path = Path(given).expanduser().resolve()
    problem = (
        "does not exist (W&B would write to a temporary folder instead)"
        if not path.exists()
        else "is not a folder"
        if not path.is_dir()
        else "is not writable (W&B would write to a temporary folder instead)"
        if not os.access(path, os.W_OK | os.X_OK)
        else None
    )
    if problem:
        raise ValueError(
            f"WANDB_DIR={quote(given, 80)!r} {problem}: make the folder (mkdir -p), point WANDB_DIR at a writable "
            f"folder, unset it (W&B then writes in the working folder), or leave wandb out of {key}"
        )
    folder = _harness_folder_around(path)
    if folder is not None:
        raise ValueError(
            f"WANDB_DIR={quote(given, 80)!r} is inside the harness {folder}, which W&B would fill with its own "
            f"files (wandb/): give W&B a folder of its own, or unset WANDB_DIR (W&B then writes in the working folder)"
        )


def check_tracking_uri(uri: Optional[str] = None, key: str = "--log-with") -> None:
    """``MLFLOW_TRACKING_URI`` (default: the environment's) checked before any work, as every other location: one of
    MLflow's store schemes (:data:`MLFLOW_SCHEMES`; ``databricks`` and ``databricks-uc`` alone are Databricks
    stores) or a local path; a database URL SQLAlchemy can open, its driver installed and its server listening
    (:func:`_check_database`); a Databricks store with a workspace named (:func:`_check_databricks`); a local
    store (a folder, a ``file:`` URI, an ``sqlite:`` database file) never inside a harness output folder
    (a run, a sweep, an ensemble...: MLflow would fill it with its own files); an existing ``sqlite:`` file an SQLite
    database; no file store where the installed MLflow (>= 3) refuses one as the run starts; and a tracking server
    (``http(s)://``) that answers within :data:`harness.network.TIMEOUT` seconds (MLflow would retry for minutes). ``key``: the setting that names mlflow (``train.log_with``, ``--log-with``),
    for the messages, which never show a password.

    Raises:
        ValueError: another scheme (``pipe:``, ``s3:``...); a database URL SQLAlchemy cannot read (``sqlite:x.db``),
            with a driver not installed, or with no server at its host and port; a Databricks store without a
            workspace; a store inside a harness output folder (a run, a sweep, an ensemble, a report...); an ``sqlite:``
            file that is a folder or not an SQLite database; a file store
            with MLflow >= 3 (the fix: :data:`LOCAL_STORE`, or ``MLFLOW_ALLOW_FILE_STORE=true``); a server that does
            not answer; each naming the variable, the value and the fix.
    """
    uri = os.environ.get("MLFLOW_TRACKING_URI") if uri is None else uri
    variable = "MLFLOW_TRACKING_URI"
    if not uri:  # MLflow's own default: a store in the working folder (audit18 A18-11)
        uri, variable = _default_store(), "MLflow's default store (MLFLOW_TRACKING_URI unset)"
        if not uri:
            return
    scheme = uri.lower() if uri.lower() in DATABRICKS else urlparse(uri).scheme.lower().split("+")[0]
    shown = f"{variable} {_masked(uri)[:80]!r}"
    if scheme and len(scheme) > 1 and scheme not in MLFLOW_SCHEMES:
        raise ValueError(
            f"{shown} is a {scheme}: URI, not an MLflow store: give a database "
            f"({LOCAL_STORE}) or a tracking server (http://host:5000)"
        )
    if scheme in DATABRICKS:
        return _check_databricks(uri, shown, key)
    if scheme in DATABASES:
        _check_database(uri, scheme, shown, key)
    path = _local_store_path(uri, scheme)
    folder = _harness_folder_around(path) if path is not None else None
    if folder is not None:
        raise ValueError(
            f"{shown} is inside the harness {folder}, which MLflow would fill with its own files: give the "
            f"store a folder of its own, e.g. MLFLOW_TRACKING_URI={LOCAL_STORE} in another working folder (run the "
            "command from there)"
        )
    if scheme == "sqlite" and path is not None:
        _check_sqlite_file(path, shown, key)
    refused = _file_store_refused() if path is not None and scheme != "sqlite" else None
    if refused:
        raise ValueError(
            f"{shown} is a file store (a folder), which the installed MLflow {refused} refuses "
            f"when the run starts (its file store is in maintenance mode), and the run would go on untracked: give "
            f"a database, e.g. MLFLOW_TRACKING_URI=sqlite:///{path.parent / 'mlflow.db'}, or a tracking server "
            f"(http://host:5000); or set MLFLOW_ALLOW_FILE_STORE=true to keep the file store; or leave mlflow out "
            f"of {key}"
        )
    if scheme in ("http", "https"):
        reason = unreachable(uri.rstrip("/") + "/health")
        if reason:
            raise ValueError(
                f"{shown}: no tracking server answers there within {TIMEOUT:g} s ({reason}); "
                f"MLflow would retry for minutes and then run untracked: start the server (mlflow server --host "
                f"HOST --port PORT), correct MLFLOW_TRACKING_URI, use a local database (MLFLOW_TRACKING_URI="
                f"{LOCAL_STORE}), or leave mlflow out of {key}"
            )


#: W&B's modes as its documentation lists them, for a wandb whose ``wandb.Settings`` schema does not list them
WANDB_MODES = ("online", "offline", "shared", "disabled", "dryrun", "run")
#: W&B's modes that log to no server (``dryrun``: an old name of ``offline``); every other mode runs online
WANDB_LOCAL_MODES = ("offline", "dryrun", "disabled")
#: W&B's cloud host names, whose API keys ``wandb login`` may have stored under ``api.wandb.ai``
WANDB_CLOUD = ("api.wandb.ai", "forge.coreweave.com", "api.forge.coreweave.com")


def _wandb_files() -> "dict[str, tuple[str, str]]":
    """``mode``, ``base_url`` and ``api_key`` as W&B's settings files give them (``wandb offline``, ``wandb login
    --host`` write them): the global file (``$WANDB_CONFIG_DIR/settings``, else ``~/.config/wandb/settings``), then
    the workspace's (``wandb/settings`` in ``WANDB_DIR`` or the working folder), each as ``(value, file)``; a
    file wandb cannot read either is left out, as wandb leaves it out."""
    root = Path(os.environ.get("WANDB_DIR") or ".")
    workspace = root / (".wandb" if (root / ".wandb").exists() else "wandb") / "settings"
    out: "dict[str, tuple[str, str]]" = {}
    for file in (Path(os.environ.get("WANDB_CONFIG_DIR") or "~/.config/wandb").expanduser() / "settings", workspace):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(file)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        given = parser["default"] if parser.has_section("default") else {}
        out.update({k: (given[k], str(file)) for k in ("mode", "base_url", "api_key") if given.get(k)})
    return out


def _netrc_key(hosts: "tuple[str, ...]") -> "tuple[bool, str]":
    """Whether the netrc file (``NETRC``, else ``~/.netrc``, else ``~/_netrc``) holds a password for one of
    ``hosts``, and the file's name (for messages)."""
    import netrc

    home = Path("~").expanduser()
    path = Path(os.environ["NETRC"]).expanduser() if os.environ.get("NETRC") else home / ".netrc"
    if not os.environ.get("NETRC") and not path.exists() and (home / "_netrc").exists():
        path = home / "_netrc"
    try:
        found = netrc.netrc(str(path))
    except (OSError, netrc.NetrcParseError):
        return False, str(path)
    return any((found.authenticators(h) or (None, None, None))[2] for h in hosts), str(path)


def check_wandb(key: str = "--log-with") -> None:
    """W&B's settings checked before any work, as wandb reads them (its settings files, then the ``WANDB_*``
    variables): ``WANDB_MODE`` one of wandb's modes (read from its own ``wandb.Settings`` schema); and, online (any
    mode but :data:`WANDB_LOCAL_MODES`), an API key (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``, a settings
    file's ``api_key``, or the netrc entry ``wandb login`` writes for the server's host) and a server
    (``WANDB_BASE_URL``, a settings file's ``base_url``, else wandb's default) answering within
    :data:`harness.network.TIMEOUT` seconds; ``WANDB_DIR`` in every mode but ``disabled`` (:func:`check_wandb_dir`).
    Whether W&B accepts the key is its server's to tell. Nothing is
    checked without wandb installed (:func:`harness.training.trackers.available` names the install).

    Raises:
        ValueError: an unknown mode, a bad ``WANDB_DIR``, no API key online, a server URL that is not http(s) or does not answer; each
            naming the variable, its value and the fix (``WANDB_MODE=offline`` runs without a server).
    """
    try:
        import wandb
    except ImportError:
        return
    from typing import get_args

    field = getattr(wandb.Settings, "model_fields", {}).get("mode")  # the pydantic schema of wandb's settings
    modes = get_args(getattr(field, "annotation", None)) or WANDB_MODES
    later = "wandb would fail as the run starts, and the run would go on untracked: "
    offline = (
        f"set WANDB_MODE=offline to track without a server (wandb sync uploads the run later); or leave wandb out "
        f"of {key}"
    )
    mode = os.environ.get("WANDB_MODE")
    if mode is not None and mode not in modes:
        raise ValueError(
            f"WANDB_MODE={mode!r} is not one of W&B's modes ({', '.join(modes)}): {later}set WANDB_MODE=online, or "
            f"{offline}"
        )
    files = _wandb_files()
    if mode is None and files.get("mode", ("",))[0] in modes:
        mode, said = files["mode"][0], f"mode = {files['mode'][0]} in {files['mode'][1]}"
    else:
        said = f"WANDB_MODE={mode}" if mode is not None else "WANDB_MODE unset"
        mode = mode or "online"
    if mode == "disabled":
        return
    check_wandb_dir(key)
    if mode in WANDB_LOCAL_MODES:
        return
    if os.environ.get("WANDB_BASE_URL"):
        base, where = os.environ["WANDB_BASE_URL"], "WANDB_BASE_URL"
    elif "base_url" in files:
        base, where = files["base_url"][0], f"base_url in {files['base_url'][1]}"
    else:
        base, where = wandb.Settings().base_url, "wandb's default server"
    host = urlsplit(base).hostname or ""
    hosts = tuple(dict.fromkeys((urlsplit(base).netloc, *(("api.wandb.ai",) if host in WANDB_CLOUD else ()))))
    in_netrc, netrc_file = _netrc_key(hosts)
    if not (os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE") or "api_key" in files):
        if not in_netrc:
            missing = "" if Path(netrc_file).exists() else " (no such file)"
            raise ValueError(
                f"W&B runs online here ({said}) and finds no API key for {base} ({where}): WANDB_API_KEY is unset "
                f"and {netrc_file}{missing} has no entry for {' or '.join(hosts)}, so {later}run wandb login (it "
                f"keeps the key in {netrc_file}) or set WANDB_API_KEY; or {offline}"
            )
    try:
        reason = unreachable(base)
    except ValueError:
        reason = "not an http(s) URL"
    fix = f"correct {where}" if where.startswith(("WANDB", "base_url")) else "check the network (and HTTPS_PROXY)"
    if reason:
        raise ValueError(
            f"W&B runs online here ({said}), and its server {base!r} ({where}) does not answer within "
            f"{TIMEOUT:g} s ({reason}), so {later}{fix}, or {offline}"
        )
