"""``graphdoc serve`` (graphdoc.retrieval.server): an index searched over HTTP, answers equal to the Searcher's."""

from __future__ import annotations

import json
import shutil
import threading
import urllib.parse
from pathlib import Path

import pytest
from _retrieval_helpers import cli, error_line, make_docs, write_jsonl
from _serve_helpers import build_served_index, fetch, get, post, raw, serving

from graphdoc.retrieval.builder import build_index
from graphdoc.retrieval.searcher import Searcher
from graphdoc.retrieval.server import make_server

pytestmark = pytest.mark.usefixtures("restore_cli_state", "no_key_in_the_environment")


@pytest.fixture
def no_key_in_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("GRAPHDOC_API_KEY", raising=False)  # (a developer's own would make every serve need it)


@pytest.fixture(scope="module")
def built(model, tmp_path_factory) -> Path:
    return build_served_index(model, tmp_path_factory.mktemp("serve"))


@pytest.fixture
def served(built, model, tmp_path):
    index = Path(shutil.copytree(built, tmp_path / "index"))
    with serving(index, model) as base:
        yield index, base


def test_search_similar_and_document_answer_as_the_searcher(served, model) -> None:
    index, base = served
    with Searcher(index, model=model) as searcher:
        hits = [vars(hit) for hit in searcher.search("zebra fox", k=3)]
        dense = [vars(hit) for hit in searcher.search("zebra fox", k=2, mode="dense")]
        like = [vars(hit) for hit in searcher.similar("d004", k=2)]
        record = searcher.document("d004")
        run = searcher.batch_search({"a": "graph attention", "b": "lazy dog"}, k=4, mode="bm25")
    assert get(f"{base}/search?q=zebra+fox&k=3") == (200, {"query": "zebra fox", "mode": "hybrid", "hits": hits})
    assert get(f"{base}/search?q=zebra%20fox&k=2&mode=dense")[1]["hits"] == dense
    assert get(f"{base}/similar?id=d004&k=2") == (200, {"id": "d004", "hits": like})
    assert get(f"{base}/document?id=d004") == (200, record) and record["metadata"] == {"label": "four"}
    body = json.dumps({"queries": {"a": "graph attention", "b": "lazy dog"}, "k": 4, "mode": "bm25"}).encode()
    assert post(f"{base}/search", body) == (200, {"run": run})
    assert get(f"{base}/health") == (200, {"status": "ok", "documents": 10, "build": recorded_build(index)})
    info = get(f"{base}/info")[1]
    assert (info["documents"], info["fusion"]["alpha"], info["dimension"]) == (10, 0.6, 32)
    assert info["metadata_fields"] == ["label"]
    assert [(c["part"], c["documents_read"], c["complete"]) for c in info["corpora"]] == [("1/1", 10, True)]
    assert info["corpora"][0]["corpus"].endswith("corpus.jsonl")


@pytest.mark.parametrize("path, status, error", [
    ("/search?k=3", 400, "give the query as q=..."),
    ("/search?q=+", 400, "the query is empty"),
    ("/search?q=x&k=0", 400, "k must be from 1 to 10000; got 0"),
    ("/search?q=x&k=ten", 400, "k must be a number; got 'ten'"),
    ("/search?q=x&mode=sparse", 400, "unknown mode 'sparse'; valid: dense, bm25, hybrid"),
    ("/search?q=x&mode=dense&alpha=0.3", 400, "alpha applies to mode hybrid, not dense"),
    ("/search?q=x&q=y", 400, "q is given 2 times; give it once"),
    ("/similar?id=nope", 404, "the index holds no document 'nope'"),
    ("/document", 400, "give the document id as id=..."),
    ("/nowhere", 404, "no endpoint GET /nowhere (endpoints: /document, /health, /info, /search, /similar; POST "
                      "/search)"),
    ("/search?q=x&mod=bm25", 400, "unknown parameter 'mod' for GET /search (valid: q, k, mode, alpha, fusion, "
                                  "normalization, filter)"),
    ("/search?q=x&filter=label", 400, "filter takes FIELD=VALUE (split at the first =); got 'label'"),
    ("/similar?id=d001&filter=lable=four", 400, "unknown filter field 'lable' (did you mean 'label'?): no document "
                                                "of index {index} has it; fields: label"),
    ("/health?verbose=1", 400, "unknown parameter 'verbose' for GET /health (it takes none)"),
])
def test_bad_requests_are_one_line_errors(served, path, status, error) -> None:
    assert get(served[1] + path) == (status, {"error": error.format(index=served[0])})


@pytest.mark.parametrize("body, error", [
    (b"{not json", "the body is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
                   "(char 1))"),
    (b'{"k": 3}', 'the body must be a JSON object with "queries" (an object {id: text} or a list)'),
    (b'{"queries": ["x"], "top": 3}', "unknown field 'top' (valid: queries, k, mode, fusion, filter)"),
    (b'{"queries": ["x"], "k": true}', "k must be an integer from 1 to 10000; got True"),
    (b'{"queries": "DNA"}', '"queries" must be an object {id: text} or a list of texts; got str'),
    (b'{"queries": ["x"], "mode": "bm25", "fusion": {"alpha": 0.3}}', "fusion applies to mode hybrid, not bm25"),
    (b'{"queries": ["x"], "filter": ["label=four"]}', "a filter is a mapping {field: value or [values]}; got list"),
    (b'{"queries": ["x"], "filter": {"label": []}}', "filter field 'label' has an empty list of values; give at "
                                                     "least one"),
])
def test_bad_batch_bodies_are_400(served, body, error) -> None:
    assert post(served[1] + "/search", body) == (400, {"error": error})


def test_search_and_similar_filter_by_metadata(served, model, tmp_path) -> None:
    index, base = served
    with Searcher(index, model=model) as searcher:
        hits = [vars(hit) for hit in searcher.search("zebra fox", k=3, filter={"label": "four"})]
        like = [vars(hit) for hit in searcher.similar("d001", k=3, filter={"label": ["four", "five"]})]
        run = searcher.batch_search({"a": "graph attention"}, k=4, mode="dense", filter={"label": "four"})
    assert [hit["doc_id"] for hit in hits] == [hit["doc_id"] for hit in like] == ["d004"] and list(run["a"]) == ["d004"]
    assert get(f"{base}/search?q=zebra+fox&k=3&filter=label=four") == (200, {"query": "zebra fox", "mode": "hybrid",
                                                                           "hits": hits})
    assert get(f"{base}/similar?id=d001&k=3&filter=label%3Dfour&filter=label=five") == (200, {"id": "d001",
                                                                                            "hits": like})
    body = {"queries": {"a": "graph attention"}, "k": 4, "mode": "dense", "filter": {"label": "four"}}
    assert post(f"{base}/search", json.dumps(body).encode()) == (200, {"run": run})
    assert get(f"{base}/search?q=zebra&filter=label=five")[1]["hits"] == []
    more = make_docs(2, seed=3, start=10)
    more[1]["label"] = "five"  # the rebuilt index's metadata, not the first build's, is filtered
    build_index(model, str(write_jsonl(tmp_path / "more.jsonl", more)), index)
    assert [hit["doc_id"] for hit in get(f"{base}/search?q=zebra&filter=label=five")[1]["hits"]] == ["d011"]


def test_a_rebuilt_index_is_served_from_the_next_request(served, model, tmp_path) -> None:
    index, base = served
    assert get(f"{base}/health")[1]["documents"] == 10
    build_index(model, str(write_jsonl(tmp_path / "more.jsonl", make_docs(2, seed=3, start=10))), index)
    assert get(f"{base}/health")[1]["documents"] == 12
    assert get(f"{base}/document?id=d011")[0] == 200


def recorded_build(index: Path) -> str:
    """The build id ``final/build.json`` records."""
    return json.loads((index / "final" / "build.json").read_text(encoding="utf-8"))["build"]


def test_answers_name_their_build_and_a_delete_while_serving_changes_it(served) -> None:
    from graphdoc.retrieval import delete_documents
    from graphdoc.retrieval.server import BUILD_HEADER

    index, base = served
    first = recorded_build(index)
    assert get(f"{base}/health") == (200, {"status": "ok", "documents": 10, "build": first})
    assert get(f"{base}/info")[1]["build"] == first
    for status, _, headers in (fetch(f"{base}/search?q=zebra"), fetch(f"{base}/similar?id=nope"),
                               fetch(f"{base}/search", b"{"), fetch(f"{base}/health")):
        assert headers[BUILD_HEADER] == first  # an answer or an error alike
    delete_documents(index, ["d007"])  # (final/ rebuilt while the server runs)
    second = recorded_build(index)
    assert second != first
    status, body, headers = fetch(f"{base}/search?q=zebra&mode=bm25")
    assert (status, headers[BUILD_HEADER], body["hits"]) == (200, second, [])  # d007, the zebra's, deleted
    assert get(f"{base}/health") == (200, {"status": "ok", "documents": 9, "build": second})
    assert get(f"{base}/info")[1]["build"] == fetch(f"{base}/info")[2][BUILD_HEADER] == second


def test_an_index_finalised_before_build_json_is_named_by_the_id_a_rebuild_records(built, model, tmp_path) -> None:
    index = Path(shutil.copytree(built, tmp_path / "index"))
    recorded = recorded_build(index)
    (index / "final" / "build.json").unlink()
    with Searcher(index, model=model) as searcher:
        assert searcher.build == recorded


def test_cli_refuses_a_bad_port_and_a_missing_index(tmp_path, capsys) -> None:
    assert cli("serve", "--index-dir", tmp_path, "--port", 70000) == 1
    assert error_line(capsys, "serve") == "graphdoc serve: error: --port must be from 0 to 65535; got 70000"
    assert cli("serve", "--index-dir", tmp_path / "none") == 1
    assert error_line(capsys, "serve") == f"graphdoc serve: error: index folder not found: {tmp_path / 'none'}"


def test_cli_serves_until_interrupted(built, monkeypatch, capsys) -> None:
    from graphdoc.retrieval import server as server_module

    def interrupted(self, poll_interval=0.5):
        raise KeyboardInterrupt

    monkeypatch.setattr(server_module.SearchServer, "serve_forever", interrupted)
    assert cli("serve", "--index-dir", built, "--port", 0) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"serving {built} (10 documents) on http://127.0.0.1:") and out.endswith(
        "/ (Ctrl-C stops)\n")
    assert urllib.parse.urlsplit(out.split(" on ")[1].split(" ")[0]).port > 0


def test_a_body_not_read_closes_the_connection(served) -> None:
    """Bytes of a body the server did not read are not taken as the next request (keep-alive)."""
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    for head in (b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n",
                 b"GET /info HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(smuggled)):
        answer = raw(served[1], head + smuggled)
        assert answer.count(b"HTTP/1.1 ") == 1 and b"Connection: close" in answer
    answer = raw(served[1], b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b'"Content-Length \'-1\' is not a size in bytes"' in answer


def test_other_methods_and_garbage_get_one_json_error(served) -> None:
    answer = raw(served[1], b"PUT /search HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 501 ") and b"application/json" in answer
    assert answer.endswith(b'{"error": "method PUT is not supported: GET or POST"}')
    answer = raw(served[1], b"GARBAGE\r\n\r\n")  # (no HTTP version: answered as HTTP/0.9, the body alone)
    assert answer.endswith(b'{"error": "Bad request syntax (\'GARBAGE\')"}')


def test_a_build_finalised_after_the_searcher_opened_it_is_noticed(built, model, tmp_path) -> None:
    """Opened while a build was being finalised (final/ in place, the manifest not yet saved): the manifest saved
    afterwards is a new build to open; a manifest saved by a build still under way is not."""
    from graphdoc.retrieval.searcher import build_changed

    index = Path(shutil.copytree(built, tmp_path / "index"))
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    (index / "manifest.json").write_text(json.dumps({**manifest, "finalized": False}), encoding="utf-8")
    with Searcher(index, model=model) as searcher:
        assert searcher.updating and not build_changed(searcher)
        (index / "manifest.json").write_text(json.dumps({**manifest, "finalized": False, "created": "x"}),
                                             encoding="utf-8")
        assert not build_changed(searcher) and not build_changed(searcher)  # still under way
        (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        assert build_changed(searcher)
    with Searcher(index, model=model) as searcher:
        assert not searcher.updating and not build_changed(searcher)
        build_index(model, str(write_jsonl(tmp_path / "more.jsonl", make_docs(1, seed=4, start=20))), index)
        assert build_changed(searcher)


def test_a_model_named_by_a_string_is_loaded_once(built, model_dir, monkeypatch, tmp_path) -> None:
    import graphdoc.backbones as backbones

    loads = []
    load_model = backbones.load_model
    monkeypatch.setattr(backbones, "load_model", lambda *a, **k: loads.append(a) or load_model(*a, **k))
    index = Path(shutil.copytree(built, tmp_path / "index"))
    service = make_server(index, port=0, model=str(model_dir))
    try:
        assert service.service.answer("GET", "/health", {}, None)["documents"] == 10
        build_index(service.service.model, str(write_jsonl(tmp_path / "m.jsonl", make_docs(1, seed=5, start=30))),
                    index)
        assert service.service.answer("GET", "/health", {}, None)["documents"] == 11
        assert len(loads) == 1
    finally:
        service.server_close()


def test_a_body_that_does_not_arrive_is_one_400_and_closes(served, monkeypatch) -> None:
    from graphdoc.retrieval import server as server_module

    monkeypatch.setattr(server_module._Handler, "timeout", 1)
    answer = raw(served[1], b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in answer
    assert b'"the 100 bytes of the body did not arrive (timed out)"' in answer


def test_a_request_under_way_when_the_server_stops_is_answered(built, model, tmp_path, monkeypatch) -> None:
    from graphdoc.retrieval.server import SearchService

    index = Path(shutil.copytree(built, tmp_path / "index"))
    server = make_server(index, port=0, model=model)
    entered, release = threading.Event(), threading.Event()
    answer = SearchService.answer

    def slow(self, *args):
        entered.set()
        release.wait(10)
        return answer(self, *args)

    monkeypatch.setattr(SearchService, "answer", slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    got = []
    client = threading.Thread(target=lambda: got.append(get(server.url + "health")))
    client.start()
    assert entered.wait(10)
    server.shutdown()  # (what Ctrl-C does to serve_forever), then no new connection
    server.server_close()
    assert server.wait_idle(0.05) == 1  # still under way
    release.set()
    assert server.wait_idle(10) == 0
    client.join(10)
    assert got and got[0][0] == 200
    thread.join(5)
    server.service.searcher.close()


def test_an_ipv6_address_is_served(built, model, tmp_path) -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback (::1)")
    server = make_server(built, host="::1", port=0, model=model)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert server.url.startswith("http://[::1]:")
        status, body = get(server.url + "info")
        assert status == 200 and body["documents"] == 10
    finally:
        server.shutdown()
        server.server_close()
        server.service.searcher.close()
        thread.join(5)


def test_cli_stops_on_sigterm_as_on_ctrl_c(built, monkeypatch, capsys) -> None:
    import os
    import signal
    import time

    from graphdoc.retrieval import server as server_module

    def terminated(self, poll_interval=0.5):
        os.kill(os.getpid(), signal.SIGTERM)  # (docker stop, kill)
        time.sleep(5)  # the handler raises in this thread before the sleep ends
        raise AssertionError("SIGTERM did not stop the server")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(server_module.SearchServer, "serve_forever", terminated)
    assert cli("serve", "--index-dir", built, "--port", 0) == 0
    assert signal.getsignal(signal.SIGTERM) is before  # put back as it was
    assert capsys.readouterr().out.startswith(f"serving {built} (10 documents) on http://127.0.0.1:")
