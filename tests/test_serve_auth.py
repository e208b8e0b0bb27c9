"""``graphdoc serve --api-key-file FILE`` (or ``GRAPHDOC_API_KEY``): every endpoint but ``/health`` needs the key."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from _retrieval_helpers import cli, error_line
from _serve_helpers import build_served_index, fetch, get, raw, serving

from graphdoc.retrieval import server as server_module
from graphdoc.retrieval.server import NO_KEY, WRONG_KEY

pytestmark = pytest.mark.usefixtures("restore_cli_state")

KEY = "s3cret-Key_42"
BATCH = json.dumps({"queries": ["zebra"], "k": 2, "mode": "bm25"}).encode()


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("GRAPHDOC_API_KEY", raising=False)


@pytest.fixture(scope="module")
def built(model, tmp_path_factory) -> Path:
    return build_served_index(model, tmp_path_factory.mktemp("serve-auth"))


@pytest.fixture(scope="module")
def keyed(built, model):
    with serving(built, model, api_key=KEY) as base:
        yield base


@pytest.mark.parametrize("path, body", [("/search?q=zebra&k=2", None), ("/info", None), ("/document?id=d004", None),
                                        ("/similar?id=d004", None), ("/nowhere", None), ("/search", BATCH),
                                        ("/health", BATCH)])
def test_without_the_key_every_endpoint_but_health_is_401(keyed, path, body) -> None:
    for headers, error in (({}, NO_KEY), ({"Authorization": "Bearer"}, NO_KEY), ({"Authorization": f"Basic {KEY}"},
                                                                                 NO_KEY),
                           ({"Authorization": "Bearer wrong"}, WRONG_KEY), ({"X-API-Key": KEY + "x"}, WRONG_KEY),
                           ({"Authorization": f"Bearer {KEY[:-1]}"}, WRONG_KEY)):
        status, answer, sent = fetch(keyed + path, body, headers)
        assert (status, answer, sent["WWW-Authenticate"]) == (401, {"error": error}, "Bearer"), headers


def test_the_key_in_either_header_is_answered_as_without_a_key(keyed, built, model) -> None:
    with serving(built, model) as open_base:
        for path, body in (("/search?q=zebra&k=2", None), ("/info", None), ("/search", BATCH)):
            expected = fetch(open_base + path, body)[:2]
            assert expected[0] == 200
            for headers in ({"Authorization": f"Bearer {KEY}"}, {"authorization": f"bearer  {KEY} "},
                            {"X-API-Key": KEY}, {"Authorization": "Bearer wrong", "X-API-Key": KEY}):
                assert fetch(keyed + path, body, headers)[:2] == expected, headers


def test_health_needs_no_key(keyed) -> None:
    for path in ("/health", "/health/"):
        status, answer = get(keyed + path)
        assert (status, answer["status"], answer["documents"]) == (200, "ok", 10)


def test_a_refusal_is_logged_without_the_key(keyed, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="graphdoc.retrieval.server"):
        assert get(keyed + "/info", {"Authorization": "Bearer not-" + KEY})[0] == 401
        assert get(keyed + "/search?q=x")[0] == 401
    # (a line of an earlier test's request may come late: its server logs an answer after sending it)
    lines = [r.getMessage() for r in caplog.records if r.name == "graphdoc.retrieval.server" and " 401 " in
             r.getMessage()]
    assert lines == ["GET /info 401 (a wrong API key, from 127.0.0.1)", "GET /search?q=x 401 (no API key, from "
                                                                       "127.0.0.1)"]
    assert not any(KEY in record.getMessage() for record in caplog.records)


def test_a_refused_body_is_not_read_as_the_next_request(keyed) -> None:
    head = b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(BATCH)
    answer = raw(keyed, head + BATCH + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 401 ") and answer.count(b"HTTP/1.1 ") == 1
    assert b"Connection: close" in answer and b"WWW-Authenticate: Bearer\r\n" in answer


def test_a_key_is_compared_in_a_time_that_tells_nothing_of_its_length(monkeypatch) -> None:
    """``hmac.compare_digest`` of two texts ends at once when their lengths differ: what it is given is of one
    length, whatever the key's and the one sent."""
    import hmac

    from graphdoc.retrieval.auth import refusal

    compared, real = [], hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((len(a), len(b))) or real(a, b))
    for sent, refused in (("x", WRONG_KEY), ("y" * 100, WRONG_KEY), (KEY[:-1], WRONG_KEY), (KEY, None)):
        assert refusal(KEY, "GET", "/info", {"X-API-Key": sent}) == refused, sent
        assert refusal(KEY, "POST", "/search", {"Authorization": f"Bearer {sent}"}) == refused, sent
    assert len(compared) == 8 and set(compared) == {(32, 32)}


def test_make_server_refuses_a_key_no_header_can_carry(built, model) -> None:
    from graphdoc.errors import GraphDocError
    from graphdoc.retrieval.server import make_server

    unsendable = ("api_key holds a space, a control or a non-ASCII character: a key goes into an HTTP header "
                  "(Authorization: Bearer KEY), which carries printable ASCII without spaces")
    for key, error in (("", "api_key is empty: give a key, or None to serve without one"), ("two words", unsendable),
                       ("clé", unsendable), ("tab\tkey", unsendable), (42, "api_key must be a str; got int")):
        with pytest.raises(GraphDocError) as err:
            make_server(built, port=0, model=model, api_key=key)
        assert str(err.value) == error


# ----------------------------------------------------------------- the command line
@pytest.fixture
def started(monkeypatch) -> list:
    """``graphdoc serve`` stops at once (Ctrl-C); the servers it made are listed here."""
    servers = []

    def interrupted(self, poll_interval=0.5):
        servers.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(server_module.SearchServer, "serve_forever", interrupted)
    return servers


def test_cli_reads_the_key_from_the_file_first_line_else_the_environment(built, started, tmp_path, monkeypatch,
                                                                         capsys) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text(f"  {KEY} \nsecond line\n", encoding="utf-8")
    monkeypatch.setenv("GRAPHDOC_API_KEY", "from-the-environment")
    assert cli("serve", "--index-dir", built, "--port", 0, "--api-key-file", key_file) == 0
    assert cli("serve", "--index-dir", built, "--port", 0) == 0
    monkeypatch.delenv("GRAPHDOC_API_KEY")
    assert cli("serve", "--index-dir", built, "--port", 0) == 0
    assert [server.api_key for server in started] == [KEY, "from-the-environment", None]
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" on http://127.0.0.1:")[1].split("/", 1)[1] for line in out] == [
        ", API key required (Ctrl-C stops)", ", API key required (Ctrl-C stops)", " (Ctrl-C stops)"]


@pytest.mark.parametrize("make, error", [
    (lambda folder: folder / "none.txt", "--api-key-file {file}: no such file"),
    (lambda folder: folder, "--api-key-file {file} is a folder; name the file holding the key"),
    (lambda folder: write(folder / "k", b"\n" + KEY.encode()), "--api-key-file {file}: its first line is empty; write "
                                                              "the key on it"),
    (lambda folder: write(folder / "k", b""), "--api-key-file {file}: its first line is empty; write the key on it"),
    (lambda folder: write(folder / "k", b"\xff\xfe"), "--api-key-file {file} cannot be read ('utf-8' codec can't "
                                                      "decode byte 0xff in position 0: invalid start byte)"),
    (lambda folder: write(folder / "k", b"my key\n"), "the first line of --api-key-file {file} holds a space, a "
                                                      "control or a non-ASCII character: a key goes into an HTTP "
                                                      "header (Authorization: Bearer KEY), which carries printable "
                                                      "ASCII without spaces"),
])
def test_cli_refuses_a_bad_key_file_before_serving(built, started, tmp_path, capsys, make, error) -> None:
    file = make(tmp_path)
    assert cli("serve", "--index-dir", built, "--port", 0, "--api-key-file", file) == 1
    assert error_line(capsys, "serve") == f"graphdoc serve: error: {error.format(file=file)}"
    assert started == []


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_cli_refuses_an_empty_key_in_the_environment(built, started, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GRAPHDOC_API_KEY", "  ")
    assert cli("serve", "--index-dir", built, "--port", 0) == 1
    assert error_line(capsys, "serve") == ("graphdoc serve: error: GRAPHDOC_API_KEY is set but empty: set it to the "
                                           "key, or unset it to serve without one")
    assert started == []


def test_cli_warns_of_a_network_address_served_without_a_key(built, started, tmp_path, capsys) -> None:
    (tmp_path / "key").write_text(KEY, encoding="utf-8")
    for options in (["--host", "0.0.0.0"], ["--host", "127.0.0.1"], ["--host", "localhost"],
                    ["--host", "0.0.0.0", "--api-key-file", tmp_path / "key"]):
        assert cli("serve", "--index-dir", built, "--port", 0, *options) == 0
    port = started[0].server_address[1]
    assert capsys.readouterr().err == (f"WARNING graphdoc.cli: serving on 0.0.0.0 without an API key: anyone who can "
                                       f"reach port {port} can search the index (set one with --api-key-file FILE or "
                                       "GRAPHDOC_API_KEY)\n")
