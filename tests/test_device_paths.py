"""GPU, device and precision paths, checked on a CPU: half-precision checkpoints, the CUDA generators a load leaves
alone, torchrun's GPU per process, native bf16, tensors on the model's device."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from graphdoc import GraphDocEncoder
from graphdoc.errors import GraphDocError


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_checkpoint_stored_in_half_precision_loads_in_float32(tiny_bert: Path, tmp_path: Path, dtype) -> None:
    from transformers import AutoModel

    half = tmp_path / "half"
    shutil.copytree(tiny_bert, half)
    AutoModel.from_pretrained(tiny_bert).to(dtype).save_pretrained(half)
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) >= Version("5"):  # what transformers 5 gives without being told
        assert AutoModel.from_pretrained(half).dtype == dtype
    model = GraphDocEncoder.from_pretrained(str(half), device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # its float32 GAT layers take the vectors
    vectors = model.encode(["A first passage. And a second one.", "Another document."])
    assert vectors.shape == (2, 32) and vectors.dtype == "float32"
    full = GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu")
    expected = full.encode(["A first passage. And a second one."])
    assert abs(vectors[0] - expected[0]).max() < 0.05  # the same weights, rounded once


def test_loading_a_model_leaves_the_random_generators_alone(tiny_bert: Path, monkeypatch) -> None:
    seeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: seeded.append(seed))
    torch.manual_seed(123)
    seeded.clear()
    before = torch.random.get_rng_state()
    first = GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu")
    assert seeded == []  # the GPUs' generators: a resumed run's dropout stays its own
    assert torch.equal(torch.random.get_rng_state(), before)
    second = GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu")
    for a, b in zip(first.graph.parameters(), second.graph.parameters()):
        assert torch.equal(a, b)  # the same untrained layers on every load


@pytest.mark.parametrize("capability, expected", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                                  ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)])
def test_auto_precision_takes_bf16_only_where_the_gpu_computes_in_it(monkeypatch, capability, expected) -> None:
    from graphdoc.device import autocast_dtype

    asked = []
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # V100, T4 too
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability)
    assert autocast_dtype(torch.device("cuda:1"), "auto") == expected
    assert asked == [torch.device("cuda:1")]  # that GPU's, not the current one's
    assert autocast_dtype(torch.device("cuda:1"), "bf16") == torch.bfloat16  # asked for: honoured
    assert autocast_dtype(torch.device("cuda:1"), "fp16") == torch.float16


@pytest.mark.parametrize("device, local_rank, count, expected", [
    (None, 1, 2, "cuda:1"), ("cuda", 1, 2, "cuda:1"), ("cuda", 3, 1, "cuda:0"),  # one visible GPU per process
    ("cpu", 1, 2, "cpu"),
])
def test_under_torchrun_each_process_takes_the_gpu_of_its_local_rank(monkeypatch, device, local_rank, count,
                                                                     expected) -> None:
    from graphdoc.training import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    joined = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: bool(joined))
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda backend, rank, world_size: joined.append(backend))
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    ctx, resolved = distributed.init_from_env(device)
    assert str(resolved) == expected and ctx.rank == 1
    assert joined == ["nccl" if expected.startswith("cuda") else "gloo"]


def test_under_torchrun_one_named_gpu_for_every_process_is_refused(monkeypatch) -> None:
    from graphdoc.training import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(GraphDocError, match=r"^--device cuda:0 under torchrun would put all 2 processes of this "
                                            r"machine on one GPU: give --device cuda \(or none\), and each process "
                                            r"takes the GPU of its local rank$"):
        distributed.init_from_env("cuda:0")
    monkeypatch.setenv("LOCAL_RANK", "2")  # three processes on a machine of two GPUs
    with pytest.raises(GraphDocError, match=r"^process 0 has local rank 2 but sees 2 GPUs: start at most 2 processes "
                                            r"a machine \(torchrun --nproc-per-node\)$"):
        distributed.init_from_env("cuda")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # one process a machine (two machines): its cuda:1 is its own
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    assert str(distributed.init_from_env("cuda:1")[1]) == "cuda:1"


def test_a_flat_models_graph_pointers_are_on_its_vectors_device(tiny_bert: Path, monkeypatch) -> None:
    from graphdoc import Document, FlatEncoder

    model = FlatEncoder.from_pretrained(str(tiny_bert), device="cpu")
    prepared = [model.prepare(Document("a", "One passage.")), model.prepare(Document("b", "A first one. A second."))]
    # the encoder's vectors on another device than the CPU (meta stands in for a GPU here)
    monkeypatch.setattr(model.passage_encoder, "encode_ids", lambda ids: torch.zeros(len(ids), 32, device="meta"))
    for attention in (False, True):  # one node per document, or its passages too
        out = model(prepared, return_attention_weights=attention)
        assert out.ptr.device.type == out.node_embeddings.device.type == "meta"  # as max_passage_scores needs


def test_fine_tuning_an_encoder_under_fp16_scales_its_loss(tiny_bert: Path, tmp_path: Path, monkeypatch) -> None:
    import json

    from _finetune_helpers import labelled_files
    from safetensors.torch import load_file

    from graphdoc.finetune import ClassificationConfig, finetune_classification
    from graphdoc.finetune import loop

    files = labelled_files(tmp_path)
    config = ClassificationConfig(epochs=2, batch_size=4, lr=1e-3, dropout=0.0, max_passages=2, frozen_encoder=False)
    finetune_classification(files["train"], files["dev"], tmp_path / "plain", config=config, model=str(tiny_bert))
    # what a CUDA GPU asked for fp16 gets (a CPU runs fp32: the scaler, a "cpu" one here, is then exact)
    monkeypatch.setattr(loop, "autocast_dtype", lambda device, precision: torch.float16)
    made = []
    real = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device: made.append(device) or real(device))
    finetune_classification(files["train"], files["dev"], tmp_path / "scaled", config=config, model=str(tiny_bert))
    assert made == ["cpu"]
    [checkpoint] = (tmp_path / "scaled" / "checkpoints").iterdir()
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    assert state["scaler"]["scale"] == 65536.0  # its state is kept, for a resume
    plain, scaled = (load_file(str(tmp_path / run / "model" / "head.safetensors")) for run in ("plain", "scaled"))
    for name in plain:  # scaling by a power of two, then unscaling, changes no number
        assert torch.equal(plain[name], scaled[name])


class FakeGpuFaiss:
    """faiss-gpu's calls, recorded: a "GPU copy" that searches with the CPU index and refuses k > 2,048 as FAISS's
    GPU indexes do."""

    def __init__(self, monkeypatch) -> None:
        import faiss

        self.copies, self.params, self.searches = [], [], []
        fake = self

        class GpuCopy:
            def __init__(self, index) -> None:
                self.index = index

            def search(self, queries, k):
                if k > 2048:
                    raise RuntimeError(f"GPU index only supports k <= 2048 (requested {k})")
                fake.searches.append(k)
                return self.index.search(queries, k)

        class ParameterSpace:
            def set_index_parameter(self, index, name, value):
                fake.params.append((name, value))

        monkeypatch.setattr(faiss, "get_num_gpus", lambda: 2, raising=False)
        monkeypatch.setattr(faiss, "StandardGpuResources", lambda: object(), raising=False)
        monkeypatch.setattr(faiss, "index_cpu_to_gpu",
                            lambda res, gpu, index: self.copies.append(gpu) or GpuCopy(index), raising=False)
        monkeypatch.setattr(faiss, "GpuParameterSpace", ParameterSpace, raising=False)


def test_faiss_goes_to_the_gpu_asked_for_only_to_search_and_not_past_its_k(tmp_path: Path, monkeypatch) -> None:
    import numpy as np

    from graphdoc.retrieval.dense import DenseIndex

    gpu = FakeGpuFaiss(monkeypatch)
    vectors = np.random.default_rng(0).normal(size=(3000, 8)).astype(np.float32)
    DenseIndex.build(vectors).save(tmp_path / "flat.faiss")  # as finalize does: built and saved, never searched
    assert gpu.copies == []
    queries = vectors[:3]
    for device, copies in (("cpu", []), (None, [0]), ("cuda:1", [1])):
        gpu.copies.clear()
        index = DenseIndex.load(tmp_path / "flat.faiss", "cosine", "Flat", device=device)
        scores, rows = index.search(queries, 10)
        assert gpu.copies == copies and rows[:, 0].tolist() == [0, 1, 2]
    gpu.searches.clear()
    deep_scores, deep_rows = index.search(queries, 2500)  # past the GPU's k: the CPU index answers
    assert gpu.searches == [] and deep_rows.shape == (3, 2500)
    np.testing.assert_array_equal(deep_rows[:, :10], rows)
    ivf = DenseIndex.build(vectors, "IVF16,Flat")
    ivf.device = "cuda:0"
    ivf.search(queries, 5)
    ivf.nprobe = 4
    assert gpu.params == [("nprobe", 16), ("nprobe", 4)]  # the GPU copy visits the lists the CPU one would


def test_a_graph_output_comes_to_the_cpu_whole(tiny_bert: Path) -> None:
    model = GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu")
    docs = ["First passage here. Second one there.", "Only one passage."]
    [out] = list(model.iter_forward(docs, batch_size=2, return_attention_weights=True))
    moved = out.cpu()
    assert moved.node_embeddings.dtype == torch.float32 and moved.ptr.tolist() == out.ptr.tolist()
    for i in range(2):
        assert torch.equal(moved.passage_embeddings(i), out.passage_embeddings(i))
        assert torch.equal(moved.document_attention(i), out.document_attention(i))
