"""Clustering document embeddings: spherical k-means (graphdoc.clustering), scores against labels, and
``graphdoc cluster``."""

from __future__ import annotations

import numpy as np
import pytest
from _retrieval_helpers import cli, error_line, make_docs, write_jsonl

from graphdoc.clustering import cluster_scores, kmeans
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError

pytestmark = pytest.mark.usefixtures("restore_cli_state")


def blobs(sizes=(4, 9, 6), dim=8, seed=0) -> np.ndarray:
    """Tight groups around orthogonal directions, scaled at random (k-means on the sphere ignores length)."""
    rng = np.random.default_rng(seed)
    rows = [np.eye(dim)[group] * 3 + 0.02 * rng.normal(size=(n, dim)) for group, n in enumerate(sizes)]
    return np.concatenate(rows) * rng.uniform(0.5, 4, size=(sum(sizes), 1))


def test_kmeans_finds_the_groups_numbered_by_size() -> None:
    found = kmeans(blobs(), 3, seed=0, n_init=2)
    # the group of 9 (rows 4-12) is cluster 0, of 6 (rows 13-18) cluster 1, of 4 (rows 0-3) cluster 2
    assert found.assignments.tolist() == [2] * 4 + [0] * 9 + [1] * 6
    assert found.sizes == [9, 6, 4]
    assert np.allclose(np.linalg.norm(found.centroids, axis=1), 1, atol=1e-5)
    assert np.argmax(np.abs(found.centroids), axis=1).tolist() == [1, 2, 0]
    assert [found.assignments[row] for row in found.nearest] == [0, 1, 2]
    assert kmeans(blobs(), 3, seed=5).assignments.tolist() == found.assignments.tolist()


def test_equal_sizes_are_numbered_by_their_first_document() -> None:
    data = blobs((3, 3), dim=4)[[3, 0, 4, 1, 5, 2]]  # the second group's rows come first
    assert kmeans(data, 2).assignments.tolist() == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("vectors, k, message", [
    (np.ones((3, 2)), 4, "cannot make 4 clusters of 3 documents"),
    (np.ones((3, 2)), 1, "k must be an integer of at least 2; got 1"),
    (np.ones(3), 2, r"vectors must be a non-empty 2-D array \[documents, dimension\]; got shape \(3,\)"),
    (np.array([[1.0, 0], [np.nan, 1], [0, 1]]), 2, r"vectors hold 1 row\(s\) with NaN or infinite values"),
    (np.array([[1.0, 0], [0, 0], [0, 1]]), 2, "row 1 of the vectors is all zeros: it has no direction"),
    (np.vstack([np.eye(3)[:2]] * 3), 3, r"cannot make 3 clusters of 6 documents with only 2 distinct embeddings "
                                        r"\(documents of the same text\): ask for at most 2$"),
])
def test_kmeans_refuses_what_it_cannot_cluster(vectors, k, message) -> None:
    with pytest.raises(GraphDocError, match=rf"^{message}"):
        kmeans(vectors, k)


def test_cluster_scores_are_exact() -> None:
    perfect = cluster_scores(["a", "a", "b", "b"], [1, 1, 0, 0])
    assert perfect == {"NMI": pytest.approx(1.0), "ARI": pytest.approx(1.0), "purity": 1.0, "documents": 4}
    mixed = cluster_scores(["a", "a", "b", "b", None], [0, 0, 0, 1, 1])
    # clusters {a, a, b} and {b}: purity (2 + 1) / 4; the unlabelled document is left out
    assert mixed["purity"] == 0.75 and mixed["documents"] == 4
    assert mixed["ARI"] == pytest.approx(0.0) and 0 < mixed["NMI"] < 1
    with pytest.raises(GraphDocError, match="^no document has a label to score the clusters against$"):
        cluster_scores([None, None], [0, 1])


@pytest.fixture
def corpus(tmp_path):
    docs = make_docs(12)
    for i, doc in enumerate(docs):
        doc["topic"] = f"t{i % 3}"
    docs[0].pop("topic")
    return write_jsonl(tmp_path / "corpus.jsonl", docs), docs


def test_cli_writes_each_documents_cluster_and_a_summary(corpus, model_dir, tmp_path, capsys) -> None:
    path, docs = corpus
    assert cli("cluster", "--corpus", path, "-k", 3, "--output", tmp_path / "c.tsv", "--model", model_dir,
               "--labels-field", "topic") == 0
    expected = kmeans(GraphDocEncoder.from_pretrained(str(model_dir), device="cpu").encode(docs), 3, n_init=3)
    rows = [line.split("\t") for line in (tmp_path / "c.tsv").read_text(encoding="utf-8").splitlines()]
    assert rows == [[d["_id"], str(c), d.get("topic", "")] for d, c in zip(docs, expected.assignments.tolist())]
    out = capsys.readouterr().out.splitlines()
    scores = cluster_scores([d.get("topic") for d in docs], expected.assignments)
    assert out[0] == (f"against topic: NMI {scores['NMI']:.4f}  ARI {scores['ARI']:.4f}  purity "
                      f"{scores['purity']:.4f} (1 document without a label left out)")
    assert [line.split(";")[0] for line in out[1:]] == [f"cluster {c}: {n} document{'s' if n != 1 else ''}"
                                                        for c, n in enumerate(expected.sizes)]
    assert all(f"nearest its centre: {docs[row]['_id']} " in line for line, row in zip(out[1:], expected.nearest))


def test_cli_takes_an_embed_output_of_the_same_corpus(corpus, model_dir, tmp_path, capsys) -> None:
    path, docs = corpus
    assert cli("embed", "--corpus", path, "--output", tmp_path / "e.npy", "--model", model_dir) == 0
    assert cli("cluster", "--corpus", path, "-k", 2, "--output", "-", "--embeddings", tmp_path / "e.npy") == 0
    printed = capsys.readouterr()
    expected = kmeans(np.load(tmp_path / "e.npy"), 2, n_init=3).assignments.tolist()
    assert printed.out.splitlines() == [f"{d['_id']}\t{c}" for d, c in zip(docs, expected)]
    assert "cluster 0: " in printed.err  # the summary goes to stderr when stdout holds the clusters
    other = write_jsonl(tmp_path / "other.jsonl", docs[1:] + docs[:1])
    assert cli("cluster", "--corpus", other, "-k", 2, "--output", tmp_path / "c.tsv", "--embeddings",
               tmp_path / "e.npy") == 1
    assert error_line(capsys, "cluster") == (
        f"graphdoc cluster: error: --embeddings {tmp_path / 'e.npy'} is not of this corpus: row 0 is 'd000' there, "
        "'d001' in the corpus (embed the corpus again, or leave --embeddings out)")
    assert not (tmp_path / "c.tsv").exists()


@pytest.mark.parametrize("extra, message", [
    (["-k", "1"], "--clusters must be at least 2; got 1"),
    (["-k", "13"], "cannot make 13 clusters of the 12 documents of {path}"),
    (["-k", "2", "--labels-field", "colour"], "no document of {path} has a 'colour' field"),
    (["-k", "2", "--embeddings", "e.npy", "--model", "m"], "--model is not used with --embeddings (the vectors "
                                                            "are read, not embedded)"),
    (["-k", "2", "--embeddings", "e.npy", "--flat-document", "mean"], "--flat-document is not used with "
                                                                        "--embeddings (the vectors are read, not "
                                                                        "embedded)"),
    (["-k", "2", "--embeddings", "e.npy", "--device", "cpu"], "--device is not used with --embeddings (the vectors "
                                                                "are read, not embedded)"),
    (["-k", "2", "--embeddings", "e.npy", "--precision", "bf16"], "--precision is not used with --embeddings (the "
                                                                      "vectors are read, not embedded)"),
    (["-k", "2", "--embeddings", "e.npy", "--batch-size", "8"], "--batch-size is not used with --embeddings (the "
                                                                    "vectors are read, not embedded)"),
    (["-k", "2", "--batch-size", "0"], "--batch-size must be at least 1; got 0"),
    (["-k", "2", "--embeddings", "missing.npy"], "--embeddings: missing.npy not found"),
    (["-k", "2", "--embeddings", "e.txt"], "--embeddings e.txt: name a .npy file written by graphdoc embed"),
    (["-k", "2", "--embeddings", "flat.npy"], "--embeddings flat.npy: an array of shape (12,), not [documents, "
                                              "dimension] as graphdoc embed writes"),
    (["-k", "2", "--embeddings", "nan.npy"], "--embeddings nan.npy: row 3 (document 'd003') holds NaN or infinite "
                                             "values; embed the corpus again"),
    (["-k", "2", "--embeddings", "huge.npy"], "--embeddings huge.npy: row 0 (document 'd000') and 11 other rows hold "
                                              "NaN or infinite values; embed the corpus again"),
    (["-k", "2", "--embeddings", "complex.npy"], "--embeddings complex.npy: an array of complex64, not of real "
                                                 "numbers as graphdoc embed writes"),
    (["-k", "2", "--n-init", "0"], "--n-init must be at least 1; got 0"),
    (["-k", "2", "--seed", "-1"], "--seed must be at least 0; got -1"),
])
def test_cli_errors_are_one_line(corpus, model_dir, tmp_path, capsys, monkeypatch, extra, message) -> None:
    path, _ = corpus
    monkeypatch.chdir(tmp_path)
    vectors = np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32)
    vectors[3, 1] = np.nan
    arrays = {"flat": np.ones(12, dtype=np.float32), "nan": vectors, "huge": np.full((12, 4), 1e39),
              "complex": np.ones((12, 4), dtype=np.complex64)}  # (1e39: past float32's range)
    for name, array in arrays.items():
        np.save(tmp_path / f"{name}.npy", array)
        (tmp_path / f"{name}.ids.txt").write_text("".join(f"d{i:03d}\n" for i in range(12)), encoding="utf-8")
    model = [] if "--embeddings" in extra else ["--model", model_dir]
    assert cli("cluster", "--corpus", path, "--output", "c.tsv", *model, *extra) == 1
    assert error_line(capsys, "cluster") == f"graphdoc cluster: error: {message.format(path=path)}"
    assert not (tmp_path / "c.tsv").exists()


def test_cli_labels_are_one_cell_each_and_ids_with_tabs_are_refused(model_dir, tmp_path, capsys) -> None:
    docs = make_docs(4)
    for doc, label in zip(docs, ["two\nlines", "a\ttab", 7, ["x", "y"]]):
        doc["label"] = label
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    assert cli("cluster", "--corpus", corpus, "-k", 2, "--output", tmp_path / "c.tsv", "--model", model_dir,
               "--labels-field", "label") == 0
    rows = [line.split("\t") for line in (tmp_path / "c.tsv").read_text(encoding="utf-8").splitlines()]
    assert [(row[0], row[2]) for row in rows] == [("d000", "two lines"), ("d001", "a tab"), ("d002", "7"),
                                                  ("d003", '["x", "y"]')]
    docs[2]["_id"] = "with\ttab"
    capsys.readouterr()
    assert cli("cluster", "--corpus", write_jsonl(tmp_path / "t.jsonl", docs), "-k", 2, "--output",
               tmp_path / "t.tsv", "--model", model_dir) == 1
    assert error_line(capsys, "cluster") == ("graphdoc cluster: error: document id 'with\\ttab' holds a tab: it "
                                             "cannot go into id<TAB>cluster lines")


def test_cli_blank_labels_are_no_labels(model_dir, tmp_path, capsys) -> None:
    docs = make_docs(8)
    for i, doc in enumerate(docs):
        doc["topic"] = ["a", "b", "", " \t"][i % 4]
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    assert cli("cluster", "--corpus", corpus, "-k", 2, "--output", tmp_path / "c.tsv", "--model", model_dir,
               "--labels-field", "topic") == 0
    rows = [line.split("\t") for line in (tmp_path / "c.tsv").read_text(encoding="utf-8").splitlines()]
    assert [row[2] for row in rows] == ["a", "b", "", ""] * 2
    scores = cluster_scores(["a", "b", None, None] * 2, [int(row[1]) for row in rows])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"against topic: NMI {scores['NMI']:.4f}  ARI {scores['ARI']:.4f}  purity "
                      f"{scores['purity']:.4f} (4 documents without a label left out)")
    assert all(line.split("most common topic: ")[1][0] in "ab" for line in out[1:])
