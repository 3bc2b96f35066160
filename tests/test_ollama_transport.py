"""The transport's HTTP exchange (every request Archivist writes itself: `/api/show`,
`/api/embed`, `/api/version`): what it reads of the answers a server may give, byte for byte
on a socket."""

import socket
import threading

import pytest

from archivist.ollama.transport import Cut, exchange


class ScriptedServer:
    """A loopback server that answers each connection with the next scripted bytes (after
    reading the request's head and body), then closes it; it keeps what it was sent."""

    def __init__(self, *answers: bytes) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for answer in self.answers:
            connection, _ = self.listener.accept()
            with connection:
                received = b""
                while b"\r\n\r\n" not in received:
                    received += connection.recv(65536)
                head, _, body = received.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += connection.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                connection.sendall(answer)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve():
    servers = []

    def start(*answers: bytes) -> ScriptedServer:
        servers.append(ScriptedServer(*answers))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_the_request_carries_its_host_length_headers_and_body(serve):
    server = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    status, body = exchange(
        server.url + "/api/embed?x=1", b'{"a":1}', {"Authorization": "Bearer k"}, 5
    )
    assert (status, body) == (200, b"{}")
    sent = server.requests[0].decode()
    assert sent.startswith("POST /api/embed?x=1 HTTP/1.1\r\n")
    port = server.url.rsplit(":", 1)[1]
    assert f"\r\nHost: 127.0.0.1:{port}\r\n" in sent
    assert "\r\nAuthorization: Bearer k\r\n" in sent and "\r\nContent-Length: 7\r\n" in sent
    assert "\r\nConnection: close\r\n" in sent and sent.endswith('\r\n\r\n{"a":1}')


@pytest.mark.parametrize(
    "answer",
    [
        # Chunked (Go's server for an answer longer than its buffer), with an extension and a
        # trailer; an interim 100 Continue first.
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5;ext=1\r\n{"emb\r\n9\r\neddings":\r\n4\r\n[1]}\r\n0\r\nX-Trailer: t\r\n\r\n',
        # No length: the body ends with the connection.
        b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"embeddings":[1]}',
        b'HTTP/1.1 200 OK\r\ncontent-length: 18\r\n\r\n{"embeddings":[1]}',
    ],
    ids=["chunked", "until-closed", "length"],
)
def test_each_way_of_ending_a_body_is_read_whole(serve, answer):
    server = serve(answer)
    assert exchange(server.url, b"{}", {}, 5) == (200, b'{"embeddings":[1]}')


@pytest.mark.parametrize(
    "answer",
    [
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"embeddings":',
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n{"embed',
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"",
    ],
    ids=["short-of-its-length", "in-a-chunk", "in-the-headers", "nothing"],
)
def test_an_answer_cut_short_is_a_cut_to_send_again(serve, answer):
    server = serve(answer)
    with pytest.raises(Cut, match="stopped before the answer was complete"):
        exchange(server.url, b"{}", {}, 5)


def test_an_answer_that_is_not_http_is_named(serve):
    server = serve(b"SSH-2.0-OpenSSH_9.2\r\n")
    with pytest.raises(ConnectionError, match=r"answer from http://127\.0\.0\.1 is not HTTP's"):
        exchange(server.url, b"{}", {}, 5)


def test_a_redirect_is_followed_with_the_same_request(serve):
    target = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    first = serve(
        f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {target.url}/api/embed\r\n"
        "Content-Length: 0\r\n\r\n".encode()
    )
    assert exchange(first.url + "/api/embed", b'{"q":2}', {}, 5) == (200, b"ok")
    assert target.requests[0].startswith(b"POST /api/embed HTTP/1.1\r\n")
    assert target.requests[0].endswith(b'{"q":2}')


def test_a_closed_port_is_a_connection_failure_naming_the_host():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(
        ConnectionError, match=r"Failed to connect to Ollama at http://127\.0\.0\.1"
    ):
        exchange(f"http://127.0.0.1:{port}/api/embed", b"{}", {}, 5)
