"""How ``rckit serve`` runs, stated once: :class:`ServeConfig`.

Each field is a setting of the server under one name: the ``rckit serve`` flag is the field's
name with dashes (``max_batch`` -> ``--max-batch``), its help text the field's ``help`` metadata,
and the server (:func:`rckit.serve.app.create_app`), its batcher and its request limits take the
same field. A value out of range is refused by :meth:`ServeConfig.check`, naming the setting,
before the model loads. ``threads`` and ``model_workers`` left as None are the backend's defaults,
which :func:`rckit.serve.app.serve` fills in once it knows the model (:func:`~rckit.serve.app.model_settings`).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from dataclasses import dataclass, field, fields
from pathlib import Path

from rckit.serve.keys import Keys
from rckit.serve.labels import LabelFile

POLICIES = ("fair", "round-robin")
ORIGIN = re.compile(r"https?://[^/\s?#]+")  # scheme://host[:port], what a browser sends as Origin


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine: localhost, 127.0.0.0/8 or ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost, or no address at all ("": every interface)
        return False


def setting(default, help: str, least: float | None = None, above: float | None = None, **extra):
    """A field of :class:`ServeConfig`: its default, its help text, and its bounds (``least``:
    the smallest value allowed; ``above``: values must be greater than it)."""
    return field(default=default, metadata={"help": help, "least": least, "above": above, **extra})


@dataclass(frozen=True)
class ServeConfig:
    """Every setting of ``rckit serve``: where it listens, how the model runs, how calls are
    batched, and what one request may ask."""

    # Where it listens.
    host: str = setting("127.0.0.1", "the address to listen on")
    port: int = setting(8000, "the port to listen on (0: a free one, printed)", least=0)
    # How the model runs.
    threads: int | None = setting(
        None,
        "each model call's threads, PyTorch's or onnxruntime's (default: onnxruntime "
        "the cores this process may use shared between its calls, sleeping between "
        "operations; PyTorch every core but one, left to the HTTP side)",
        least=1,
    )
    model_workers: int | None = setting(
        None,
        "model calls in flight at once, each formed from the requests waiting "
        "when it starts (default: onnxruntime 2 where there are 2 cores or more, "
        "PyTorch 1)",
        least=1,
    )
    always_answer: bool = setting(
        False, "a model that can say the text holds no answer gives its best span all the same"
    )
    no_answer_threshold: float | None = setting(
        None,
        'a model with a verifier says "no answer" where its '
        "probability of that is above this (0..1; default: the model's)",
        least=0,
    )
    # How calls are formed from the waiting requests (rckit.serve.batcher).
    max_batch: int = setting(32, "most items (a question on a window) in one forward pass", least=1)
    max_tokens: int = setting(
        4096,
        "most context tokens in one forward pass: bounds how long one pass keeps the "
        "model, and so how long a request arriving meanwhile waits",
        least=1,
    )
    batch_window_ms: float = setting(2.0, "how long a pass that is not full waits for requests to join it", least=0)
    policy: str = setting(
        "fair",
        "which windows go into a pass: fair (least work first, and a request waiting "
        "long first) or round-robin (one window of each request in turn)",
        choices=POLICIES,
    )
    # What one request may ask (rckit.serve.schema states them in /openapi.json). The default body
    # limit holds a body within the default lengths however its characters are escaped (12 bytes a
    # character at most: an escaped surrogate pair).
    max_body_bytes: int = setting(4_000_000, "largest request body accepted (413 above)", least=1)
    max_questions: int = setting(64, "most questions in one request", least=1)
    max_question_chars: int = setting(1_000, "longest question, in characters", least=1)
    max_context_chars: int = setting(
        200_000,
        "longest context with one question, in characters (shorter with a list of questions: --max-work)",
        least=1,
    )
    max_work: int = setting(
        2_048,
        "most readings in one request, questions x windows of the context (413 above); "
        "the context limits of /openapi.json follow from it",
        least=1,
    )
    request_timeout: float | None = setting(60.0, "seconds a request may take before it is dropped with 503", above=0)
    # Who may use it, and how much (rckit.serve.access).
    api_key: str | None = setting(
        None,
        "a key every client must send as `Authorization: Bearer KEY` on the API "
        "(/v1/...; the page, /docs, /openapi.json and /health stay open) (default: "
        "$RCKIT_API_KEY, which, unlike the flag, other users of the machine cannot see)",
        metavar="KEY",
        env="RCKIT_API_KEY",
    )
    api_key_file: str | None = setting(
        None,
        "a file of keys, one a line (`NAME KEY`, or `KEY` alone; # comments): "
        "each client its own, named in the access log; read again when it changes, "
        "so a key deleted from it stops working without a restart",
        metavar="FILE",
    )
    allow_anonymous: bool = setting(
        False,
        "listen on an address other than loopback without a key: anyone who can "
        "reach the server can use it (refused without this flag)",
    )
    rate_limit: float | None = setting(
        None,
        "requests a second one client (by key, else by address) may make on "
        "average; 429 with Retry-After above (default: no limit)",
        above=0,
    )
    burst: int = setting(
        10, "with --rate-limit: requests one client may make at once before the rate holds it", least=1
    )
    max_in_flight: int | None = setting(
        None, "requests of one client being answered at once; 429 with Retry-After above (default: no limit)", least=1
    )
    ssl_certfile: str | None = setting(
        None, "serve HTTPS with this certificate (PEM; with --ssl-keyfile)", metavar="FILE"
    )
    ssl_keyfile: str | None = setting(None, "the certificate's private key (PEM)", metavar="FILE")
    cors_origin: tuple[str, ...] = setting(
        (),
        "an origin (scheme://host[:port]) whose pages may call the API from a browser (repeatable; default: none)",
        metavar="ORIGIN",
        repeat=True,
    )
    access_log: str = setting(
        "-",
        "the access log, one JSON line a request (time, client, key name, method, "
        "path, status, ms, request id; never a key): a file, '-' for stderr, 'off' for none",
        metavar="FILE",
    )
    log_text: bool = setting(
        False, "the access log also holds the questions, contexts and answers (default: never any text)"
    )
    # A collection of documents to ask (rckit.retrieval).
    index: str | None = setting(
        None,
        "an index of documents (`rckit index`): adds POST /v1/ask and the page's tab to ask the whole collection",
        metavar="INDEX",
    )
    retriever_weight: float | None = setting(
        None,
        "with --index: how much the retriever's BM25 score counts beside the reader's (default: the measured best)",
    )
    # Labels for adapting a reader (rckit.serve.labels, rckit adapt).
    labels: str | None = setting(
        None,
        "a SQuAD file the page's Label tab adds your questions and answers to "
        "(POST /v1/labels; made on first use), for `rckit adapt --labels FILE`",
        metavar="FILE",
    )

    def check(self) -> ServeConfig:
        """This config, or a ValueError naming the first setting out of range (a FileNotFoundError
        for an index that is not there)."""
        for f in fields(self):
            value, least, above = getattr(self, f.name), f.metadata["least"], f.metadata["above"]
            if value is None:
                continue
            if least is not None and value < least:
                raise ValueError(f"{f.name} must be at least {least}, not {value}")
            if above is not None and value <= above:
                raise ValueError(f"{f.name} must be above {above}, not {value}")
            if "choices" in f.metadata and value not in f.metadata["choices"]:
                raise ValueError(f"{f.name} must be one of {', '.join(f.metadata['choices'])}, not {value!r}")
        if self.max_work < self.max_questions:
            raise ValueError(
                f"max_work ({self.max_work}) must be at least max_questions ({self.max_questions}): "
                "a list of questions reads each on at least one window"
            )
        if self.index is not None and not Path(self.index).is_file():
            raise FileNotFoundError(f"{self.index}: no such index (make one with `rckit index PATH... --out INDEX`)")
        if self.labels is not None:
            LabelFile(self.labels)  # a folder that is not there, a file that is not SQuAD: refused now
        self.check_access()
        return self

    def check_access(self) -> None:
        """Who may use the server and how it is reached: the keys (a key file is read), the
        anonymous-listening rule, TLS's two files (loaded), CORS origins, the access log's place."""
        keys = Keys(self.api_key, self.api_key_file)  # a ValueError naming the file and line of a bad key file
        if not keys.required and not self.allow_anonymous and not is_loopback(self.host):
            raise ValueError(
                f"host {self.host} is reachable from other machines and this server has no key: give "
                "it one (--api-key-file FILE, $RCKIT_API_KEY or --api-key), or, to let anyone who can "
                "reach it use it, --allow-anonymous"
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together: give both (HTTPS) or neither (HTTP)")
        if self.ssl_certfile is not None:
            for name in ("ssl_certfile", "ssl_keyfile"):
                if not Path(getattr(self, name)).is_file():
                    raise FileNotFoundError(f"{name} {getattr(self, name)}: no such file")
            try:  # a certificate that does not load is told now, not at the first connection
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
                    self.ssl_certfile, self.ssl_keyfile, password=""
                )
            except ssl.SSLError as e:
                raise ValueError(
                    f"ssl_certfile {self.ssl_certfile} with ssl_keyfile {self.ssl_keyfile}: not a PEM "
                    f"certificate and its unencrypted private key ({e.reason or e})"
                ) from None
        for origin in self.cors_origin:
            if not ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"cors_origin must be an origin, scheme://host[:port] with no path (as a browser "
                    f"sends it, e.g. https://example.org), not {origin!r}"
                )
        if self.access_log not in ("-", "off"):
            place = Path(self.access_log)
            if place.is_dir() or not place.parent.is_dir():
                raise ValueError(
                    f"access_log {self.access_log}: not a file in an existing directory (or '-' for stderr, 'off')"
                )
