"""Device selection and mixed precision: which autocast dtype each precision gets on each device."""

from __future__ import annotations

import logging

import pytest
import torch

from graphdoc import device as device_module
from graphdoc.config import ModelConfig, PassageEncoderConfig
from graphdoc.device import autocast, autocast_dtype, resolve_device
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError

CPU = torch.device("cpu")


@pytest.fixture
def bf16_cpu(monkeypatch):
    """Pretend this CPU has (``True``) or lacks (``False``) native bfloat16."""
    def set_support(supported: bool) -> None:
        monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: supported)
        device_module._warn_once.cache_clear()
    return set_support


@pytest.mark.parametrize("precision", ["auto", "fp32", "fp16"])
def test_cpu_runs_full_precision_unless_bf16_is_asked_for(bf16_cpu, precision):
    bf16_cpu(True)
    assert autocast_dtype(CPU, precision) is None


def test_cpu_bf16_where_the_cpu_has_it(bf16_cpu):
    bf16_cpu(True)
    assert autocast_dtype(CPU, "bf16") == torch.bfloat16
    with autocast(CPU, "bf16"):
        product = torch.ones(2, 3) @ torch.ones(3, 2)
    assert product.dtype == torch.bfloat16


def test_cpu_bf16_without_support_warns_once_and_runs_fp32(bf16_cpu, caplog):
    bf16_cpu(False)
    with caplog.at_level(logging.WARNING, logger="graphdoc.device"):
        assert autocast_dtype(CPU, "bf16") is None
        assert autocast_dtype(CPU, "bf16") is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "no native bfloat16" in warnings[0] and "fp32" in warnings[0]
    with autocast(CPU, "bf16"):
        assert (torch.ones(2, 3) @ torch.ones(3, 2)).dtype == torch.float32


def test_cpu_fp16_warns_once_that_it_runs_fp32(bf16_cpu, caplog):
    bf16_cpu(True)
    with caplog.at_level(logging.WARNING, logger="graphdoc.device"):
        assert autocast_dtype(CPU, "fp16") is None
        assert autocast_dtype(CPU, "fp16") is None
        assert autocast_dtype(CPU, "auto") is None
    assert caplog.messages == ["precision fp16 asked for, but CPUs run half precision slowly: running in fp32 "
                               "(bf16 is honoured on CPUs with native bfloat16)"]


def test_unknown_or_missing_devices_are_one_line_errors():
    with pytest.raises(GraphDocError, match="unknown device 'tpu0'"):
        resolve_device("tpu0")
    if not torch.cuda.is_available():
        with pytest.raises(GraphDocError, match="CUDA is not available"):
            resolve_device("cuda")


def test_bf16_passage_vectors_are_close_to_fp32(tiny_bert, bf16_cpu):
    bf16_cpu(True)
    docs = ["Graph attention networks read documents. They pass messages between passages.",
            "A second document about something else entirely, with its own words."]
    full = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")
    half = GraphDocEncoder.from_pretrained(
        tiny_bert, config=ModelConfig(passage_encoder=PassageEncoderConfig(precision="bf16")), device="cpu")
    a, b = full.encode(docs), half.encode(docs)
    assert b.dtype == a.dtype  # vectors come back in float32 whatever the arithmetic
    assert not (a == b).all()  # bf16 arithmetic did run
    cosine = (a * b).sum(1) / (((a * a).sum(1) * (b * b).sum(1)) ** 0.5)
    assert cosine.min() > 0.99
