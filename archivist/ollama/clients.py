"""The client libraries' connections to Ollama (the ollama client, LangChain's models), made
with a deadline for each whole request (`archivist.tools.deadline`), not for each read.
"""

import ssl
from functools import cache
from typing import Any

import httpx
import ollama

from archivist.ollama.transport import Endpoint
from archivist.tools.deadline import DeadlineTransport


@cache
def _tls_context() -> ssl.SSLContext:
    # Each HTTP client would load the certificate store again (~0.1 s of CPU each); httpx's
    # own default context is made once and shared.
    return httpx.create_ssl_context()


def client_kwargs(endpoint: Endpoint) -> dict[str, Any]:
    """What every client library's HTTP client to Ollama is built with: the credentials of
    OLLAMA_HOST (sent as a header on every request) and a transport that ends each request
    within the endpoint's timeout from its first byte to its last."""
    return {
        "timeout": endpoint.timeout,
        "headers": endpoint.headers,
        "transport": DeadlineTransport(endpoint.timeout, verify=_tls_context()),
    }


def langchain_kwargs(endpoint: Endpoint) -> dict[str, Any]:
    """The address and clients of a LangChain Ollama model, as `client_kwargs` makes them.

    LangChain hands `client_kwargs` to its async client too, which cannot use a synchronous
    transport: the transport goes to the synchronous client alone (the one Archivist uses),
    and the async one gets the shared TLS context (else it loads the certificate store again,
    ~0.1 s of CPU for every model built).
    """
    kwargs = client_kwargs(endpoint)
    transport = kwargs.pop("transport")
    return {
        "base_url": endpoint.address,
        "client_kwargs": kwargs,
        "sync_client_kwargs": {"transport": transport},
        "async_client_kwargs": {"verify": _tls_context()},
    }


def client(endpoint: Endpoint) -> ollama.Client:
    """An ollama client for the endpoint (streamed pulls, scoring requests)."""
    return ollama.Client(host=endpoint.address, **client_kwargs(endpoint))
