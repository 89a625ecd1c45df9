"""One quick look at a network service before any work: a server that does not answer is found in seconds, not
after minutes of its client library's retries (MLflow's HTTP client, huggingface_hub's downloads).

The look goes as the libraries' own requests do (``urllib``: the ``HTTP(S)_PROXY`` / ``NO_PROXY`` variables
apply), and any HTTP answer counts, whatever its status (401, 404, 405...): only a server that cannot be
reached at all (no route, a refused connection, no answer within the timeout, a host name that does not resolve)
is reported (:func:`unreachable`). A database server, which speaks no HTTP, gets a TCP connection and nothing
more (:func:`no_listener`).
"""

from __future__ import annotations

import ssl
from typing import Optional

#: seconds the look waits for a server to answer (a reachable one answers in well under a second)
TIMEOUT = 3.0


def unreachable(url: str, timeout: float = TIMEOUT) -> Optional[str]:
    """Why the http(s) server of ``url`` cannot be reached (one line: the error's type and text), or None when it
    answers. One ``HEAD`` request of ``url``, waiting at most ``timeout`` seconds to connect and for the answer
    (the host name's lookup is the system's); nothing is retried.

    Raises:
        ValueError: ``url`` is not an http: or https: URL.
    """
    import http.client
    import urllib.error
    import urllib.request
    from urllib.parse import urlparse

    if urlparse(url).scheme.lower() not in ("http", "https") or not urlparse(url).netloc:
        raise ValueError(f"{url!r} is not an http(s) URL: give http://host[:port] or https://host[:port]")
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):  # noqa: S310 (the scheme is checked just above)
            return None
    except urllib.error.HTTPError:
        return None  # an HTTP status: the server answered
    except urllib.error.URLError as e:
        if isinstance(e.reason, ssl.SSLError):
            return None  # it answered in TLS; its certificate is its client library's business
        return f"{type(e.reason).__name__}: {e.reason}" if isinstance(e.reason, BaseException) else str(e.reason)
    except (OSError, ValueError, http.client.HTTPException) as e:  # a timeout, no answer, an answer not in HTTP
        return f"{type(e).__name__}: {e}"


def no_listener(host: str, port: int, timeout: float = TIMEOUT) -> Optional[str]:
    """Why nothing accepts a TCP connection at ``host``:``port`` (a database server, which speaks no HTTP: one
    line, the error's type and text), or None when something does. One connection, waiting at most ``timeout``
    seconds, closed at once; nothing is sent and nothing is retried (no proxy applies)."""
    import socket

    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except (OSError, ValueError, OverflowError) as e:  # refused, no route, a timeout, a name that does not resolve
        return f"{type(e).__name__}: {e}"
