"""Eval mode for the span of an inference call, safe when several threads encode with one model."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from torch import nn

_LOCK = threading.Lock()
_USERS = "_graphdoc_eval_users"
_MODE = "_graphdoc_mode_before"


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Put `module` in eval mode for the ``with`` block and give back the mode it was in.

    Calls may overlap (threads encoding with one model): the first to enter records the caller's mode and
    the last to leave restores it, so no call runs with dropout on and a model in train mode stays there.
    """
    with _LOCK:
        users = module.__dict__.get(_USERS, 0)
        if users == 0:
            module.__dict__[_MODE] = module.training
        module.eval()  # every call: the caller may have switched the model to train mode while another ran
        module.__dict__[_USERS] = users + 1
    try:
        yield
    finally:
        with _LOCK:
            module.__dict__[_USERS] -= 1
            if module.__dict__[_USERS] == 0:
                module.train(module.__dict__.pop(_MODE))
