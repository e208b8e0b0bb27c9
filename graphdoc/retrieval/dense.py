"""Dense search over document vectors with FAISS (any ``index_factory`` string; GPU when present)."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from pathlib import Path

import numpy as np

from graphdoc.config import check_count
from graphdoc.errors import GraphDocError

logger = logging.getLogger(__name__)

METRICS = ("cosine", "ip")
TRAIN_SAMPLE = 100_000


def prepare_vectors(vectors: np.ndarray, metric: str) -> np.ndarray:
    """float32, C-contiguous, L2-normalised for ``cosine`` (then inner product is cosine)."""
    if metric not in METRICS:
        raise GraphDocError(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
    out = np.ascontiguousarray(vectors, dtype=np.float32)
    if metric == "cosine":
        with np.errstate(over="ignore"):
            norms = np.linalg.norm(out, axis=1, keepdims=True)
        big = np.isinf(norms[:, 0])
        if big.any():  # a float32 sum of squares overflows past ~1e19: those rows' norms in float64
            norms[big] = np.linalg.norm(out[big].astype(np.float64), axis=1, keepdims=True)
        out = out / np.maximum(norms, 1e-12)
    return out


#: the smallest HNSW M (links per node) and IVF list count FAISS builds an index with (HNSW0 aborts the process,
#: HNSW1 crashes it, IVF0 fails as "nprobe must be at least 1")
_SMALLEST = {"HNSW": (2, "M (links per node)"), "IVF": (1, "a list count")}


def new_faiss_index(factory: str, dimension: int):
    """An empty FAISS inner-product index; a string FAISS cannot parse is a :class:`GraphDocError`."""
    import faiss

    for kind, number in re.findall(r"(HNSW|IVF)(\d+)", factory):  # FAISS aborts or crashes on these, later
        smallest, what = _SMALLEST[kind]
        if int(number) < smallest:
            raise GraphDocError(f"bad FAISS index_factory string {factory!r}: {kind}{number} needs {what} of at "
                                f"least {smallest}")
    try:
        index = faiss.index_factory(dimension, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise GraphDocError(f"bad FAISS index_factory string {factory!r}: "
                            f"{str(exc).strip().splitlines()[-1]}") from None
    if isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)):  # its add() refuses vectors without ids
        raise GraphDocError(f"FAISS index {factory!r}: graphdoc keeps documents by row and adds no ids, so an "
                            f"IDMap cannot be filled; leave '{factory.split(',')[0].strip()},' out")
    return index


class TrainingError(GraphDocError):
    """A FAISS index that needs training could not be trained on the vectors given (too few, usually)."""


#: NSG builds its graph by NNDescent, which needs more than this many vectors
NSG_MINIMUM = 101
#: the centroids an OPQ rotation's own product quantizer trains, for each part
OPQ_CENTROIDS = 256


def training_minimum(factory: str, dimension: int) -> int:
    """The fewest vectors an index of ``factory`` can be built from: 0 when it needs no training and takes any
    number (Flat, HNSW), else the most of: its IVF lists, its product quantizers' centroids (an IVF's, a graph
    index's storage's, an OPQ rotation's), a PCA's output dimensions, and NSG's :data:`NSG_MINIMUM`. A bad string,
    or a PCA to more dimensions than it is given, is a :class:`GraphDocError`."""
    import faiss

    index = new_faiss_index(factory, dimension)
    need = 0 if index.is_trained else 1
    base = faiss.downcast_index(index)
    if isinstance(base, faiss.IndexPreTransform):
        for i in range(base.chain.size()):
            transform = faiss.downcast_VectorTransform(base.chain.at(i))
            if isinstance(transform, faiss.PCAMatrix):
                if transform.d_out > transform.d_in:
                    raise GraphDocError(f"FAISS index {factory!r}: a PCA cannot turn {transform.d_in} dimensions "
                                        f"into {transform.d_out}: give it at most {transform.d_in}")
                need = max(need, int(transform.d_out))  # as many vectors as the dimensions it keeps
            elif isinstance(transform, faiss.OPQMatrix):
                need = max(need, OPQ_CENTROIDS)
        base = faiss.downcast_index(base.index)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        need = max(need, int(ivf.nlist))
    if isinstance(base, faiss.IndexNSG):
        need = max(need, NSG_MINIMUM)
    parts = [ivf, base] + [faiss.downcast_index(getattr(base, name)) for name in ("storage", "base_index")
                           if getattr(base, name, None) is not None]
    for part in parts:
        pq = getattr(part, "pq", None) if part is not None else None
        if pq is not None:
            need = max(need, int(pq.ksub))  # k-means needs as many points as centroids
    return need


#: the most IVF lists a search visits by default (FAISS's GPU indexes take at most :data:`GPU_MAX_K`)
MAX_DEFAULT_NPROBE = 256


def default_nprobe(nlist: int) -> int:
    """The IVF lists a search visits unless told otherwise: an eighth of them, at least 16 (all of them when
    there are no more) and at most :data:`MAX_DEFAULT_NPROBE`, so a small index is searched exactly and a large
    one at high recall without scanning a fixed share of it."""
    return min(nlist, max(16, min(nlist // 8, MAX_DEFAULT_NPROBE)))


class RowSelection:
    """The rows a filtered search may return: a bool ``mask`` over all rows, and what searches make of it (its
    ``count``, its ``rows``, a FAISS selector, the selection of the passages of selected documents)."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = np.asarray(mask, dtype=bool)
        self.count = int(self.mask.sum())
        self._passages: RowSelection | None = None

    @functools.cached_property
    def rows(self) -> np.ndarray:
        """The selected rows, ascending (int64)."""
        return np.flatnonzero(self.mask)

    @functools.cached_property
    def selector(self):
        """A FAISS ``IDSelectorBitmap`` of the mask (holding its bits: FAISS reads them in place)."""
        import faiss

        bits = np.packbits(self.mask, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))  # (n: the bitmap's bytes)
        selector.referenced_objects = [bits]  # (as FAISS's own Python wrappers keep what an object points into)
        return selector

    def of_passages(self, ptr: np.ndarray) -> RowSelection:
        """The passages of the selected documents, document ``i``'s being rows ``ptr[i]:ptr[i + 1]`` (made
        once)."""
        if self._passages is None:
            self._passages = RowSelection(np.repeat(self.mask, np.diff(ptr)))
        return self._passages


class _Held:
    """Memory FAISS owns, seen by NumPy (read-only) as ``shape`` float32 at ``address``; the array made from it
    keeps this object as its base, and this object keeps the FAISS index that owns the memory."""

    def __init__(self, owner, address: int, shape: tuple[int, int]) -> None:
        self.owner = owner
        self.__array_interface__ = {"data": (address, True), "shape": shape, "typestr": "<f4", "version": 3}


class DenseIndex:
    """A FAISS inner-product index over row-ordered vectors (row ``i`` is the ``i``-th document)."""

    def __init__(self, index, metric: str = "cosine", factory: str = "Flat", device=None) -> None:
        """``device``: where searches run: ``cpu``, ``cuda:N`` (that GPU, with faiss-gpu), or ``None`` (the first
        GPU when faiss-gpu sees one, else the CPU). The GPU copy is made at the first search: an index built only
        to be saved never goes there."""
        import faiss

        self.index = index
        self.metric = metric
        self.factory = factory
        self.device = device
        self._ivf = faiss.try_extract_index_ivf(index)  # the inverted lists inside, if any (None: no IVF)
        self._gpu = None  # (GPU copy or the CPU index when it has no GPU version, its resources), when made
        if self._ivf is not None:
            self.nprobe = default_nprobe(self.nlist)

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    @property
    def nlist(self) -> int:
        """The number of inverted lists of an IVF index; 0 for any other kind."""
        return int(self._ivf.nlist) if self._ivf is not None else 0

    @property
    def nprobe(self) -> int:
        """How many of an IVF index's lists a search visits (0 for an index without lists). FAISS's own default
        is 1, which misses neighbours; graphdoc starts at :func:`default_nprobe`."""
        return int(self._ivf.nprobe) if self._ivf is not None else 0

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        check_count("nprobe", value)
        if self._ivf is None:
            raise GraphDocError(f"nprobe is a setting of IVF indexes; this one is {self.factory!r}")
        self._ivf.nprobe = min(int(value), self.nlist)
        if self._gpu is not None:
            self._set_gpu_nprobe()

    @classmethod
    def build(cls, vectors: np.ndarray, factory: str = "Flat", metric: str = "cosine",
              seed: int = 0) -> "DenseIndex":
        """Build from ``[n, d]`` vectors; an index that needs training is trained on a sample."""
        data = prepare_vectors(vectors, metric)
        index = new_faiss_index(factory, data.shape[1])
        if not index.is_trained:
            rng = np.random.default_rng(seed)
            sample = data[rng.choice(len(data), min(len(data), TRAIN_SAMPLE), replace=False)]
            try:
                index.train(sample)
            except RuntimeError as exc:
                raise TrainingError(f"cannot train FAISS index {factory!r} on {len(sample)} vectors: "
                                    f"{str(exc).strip().splitlines()[-1]}") from None
        try:
            index.add(data)
        except RuntimeError as exc:
            raise TrainingError(f"cannot build FAISS index {factory!r} from {len(data)} vectors: "
                                f"{str(exc).strip().splitlines()[-1]}") from None
        return cls(index, metric, factory)

    def search(self, queries: np.ndarray, k: int,
               allowed: RowSelection | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` rows per query: ``(scores [q, k], rows [q, k])``, row -1 where fewer exist; only rows of
        ``allowed`` when given (at least one)."""
        if allowed is not None:
            return self._search_allowed(queries, k, allowed)
        k = max(1, min(k, self.size))
        # FAISS's GPU indexes take k and nprobe up to 2,048: a deeper search (-k 1000 reads 4,000 passages) runs on
        # the CPU index
        index = self._search_index() if k <= GPU_MAX_K and self.nprobe <= GPU_MAX_K else self.index
        with _threads_for(len(queries)):
            scores, rows = index.search(prepare_vectors(queries, self.metric), k)
        return scores, rows

    def search_ties(self, queries: np.ndarray, k: int, allowed: RowSelection | None = None) -> list[np.ndarray]:
        """The rows of :meth:`search` per query (valid ones), and every further row whose score equals the last
        one's: FAISS cuts equal scores at ``k`` in its own order (the order the rows were indexed in), and the
        caller orders ties by document id, whichever of them FAISS returned first."""
        size = self.size if allowed is None else allowed.count
        k = max(1, min(k, size))
        scores, rows = self.search(queries, min(k + 1, size), allowed)  # one more: does the row past the cut tie?
        found = []
        for i in range(len(rows)):
            s, r = scores[i], rows[i]
            cut = s[k - 1]
            if len(r) > k and r[k] >= 0 and s[k] >= cut:
                depth = len(r)
                while depth < size and r[-1] >= 0 and s[-1] >= cut:  # the tie goes on past what was read
                    depth = min(2 * depth, size)
                    s, r = (x[0] for x in self.search(queries[i:i + 1], depth, allowed))
                keep = (r >= 0) & (s >= cut)
                keep[:k] = r[:k] >= 0
                found.append(r[keep])
            else:
                found.append(r[:k][r[:k] >= 0])
        return found

    def _search_allowed(self, queries: np.ndarray, k: int, allowed: RowSelection) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` among the rows of ``allowed``: FAISS skips the others (on the CPU index). An IVF index
        whose probed lists hold fewer than ``k`` of them for a query searches all its lists for it; an index type
        FAISS cannot restrict (PQ, NSG, a refined index) is searched deeper, its other rows dropped. (An HNSW
        graph's walk may still find fewer than ``k``: :class:`DenseSearcher` tops its candidates up.)"""
        import faiss

        k = max(1, min(k, allowed.count))
        prepared = prepare_vectors(queries, self.metric)
        params = faiss.SearchParametersIVF(sel=allowed.selector, nprobe=self.nprobe) if self._ivf is not None \
            else faiss.SearchParameters(sel=allowed.selector)
        try:
            with _threads_for(len(queries)):
                scores, rows = self.index.search(prepared, k, params=params)
        except RuntimeError:  # "params have incorrect type" / "not supported"
            return self._post_filtered(queries, k, allowed)
        short = np.flatnonzero((rows >= 0).sum(axis=1) < k)
        if len(short) and self._ivf is not None and self.nprobe < self.nlist:
            params = faiss.SearchParametersIVF(sel=allowed.selector, nprobe=self.nlist)
            with _threads_for(len(short)):
                scores[short], rows[short] = self.index.search(prepared[short], k, params=params)
        return scores, rows

    def _post_filtered(self, queries: np.ndarray, k: int, allowed: RowSelection) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` allowed rows of an unrestricted search, deepened until each query has them (or the
        whole index was searched)."""
        depth = k
        while True:
            depth = min(self.size, max(2 * depth, -(-k * self.size // allowed.count)))
            scores, rows = self.search(queries, depth)
            keep = (rows >= 0) & allowed.mask[np.maximum(rows, 0)]
            if depth >= self.size or (keep.sum(axis=1) >= k).all():
                break
        out_scores = np.full((len(rows), k), np.finfo(np.float32).min, dtype=np.float32)
        out_rows = np.full((len(rows), k), -1, dtype=np.int64)
        for i, kept in enumerate(keep):
            found = rows[i][kept][:k]
            out_rows[i, :len(found)], out_scores[i, :len(found)] = found, scores[i][kept][:k]
        return out_scores, out_rows

    def _search_index(self):
        """The index searches run on: the GPU copy (made now, the first time) or the CPU index."""
        if self._gpu is None:
            self._gpu = _to_gpu(self.index, self.device)
            if self._ivf is not None:
                self._set_gpu_nprobe()
        return self._gpu[0]

    def _set_gpu_nprobe(self) -> None:
        """Give the GPU copy the CPU index's ``nprobe`` (past :data:`GPU_MAX_K`, searches use the CPU index)."""
        if self._gpu[0] is not self.index and self.nprobe <= GPU_MAX_K:
            import faiss

            faiss.GpuParameterSpace().set_index_parameter(self._gpu[0], "nprobe", self.nprobe)

    def stored_vectors(self) -> np.ndarray | None:
        """The vectors of an exact (``Flat``) index as FAISS holds them in its memory, ``[size, d]`` float32,
        read-only and without a copy; ``None`` for any other kind of index, which keeps its vectors coded. The array
        holds the index alive (its base), so it stays valid on its own (vectors are never added to a loaded one)."""
        import faiss

        if type(self.index) not in (faiss.IndexFlat, faiss.IndexFlatIP) or not self.size:
            return None
        d = self.index.d
        address = faiss.rev_swig_ptr(self.index.get_xb(), self.size * d).__array_interface__["data"][0]
        return np.asarray(_Held(self.index, address, (self.size, d)))

    def save(self, path: str | Path) -> None:
        import faiss

        if _faiss_name(path) is None:  # FAISS takes only UTF-8 names: the bytes are written here instead
            with open(path, "wb") as handle:
                handle.write(faiss.serialize_index(self.index).tobytes())
            return
        faiss.write_index(self.index, _faiss_name(path))

    @classmethod
    def load(cls, path: str | Path, metric: str, factory: str, mmap: bool = True, device=None) -> "DenseIndex":
        """Read an index written by :meth:`save`; ``device`` as for the constructor."""
        import faiss

        name = _faiss_name(path)
        if name is None:  # (read into memory, not memory-mapped)
            return cls(faiss.deserialize_index(np.fromfile(path, dtype=np.uint8)), metric, factory, device)
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
        try:
            index = faiss.read_index(name, flags)
        except RuntimeError:  # not every index type can be memory-mapped
            index = faiss.read_index(name)
        return cls(index, metric, factory, device)


def _faiss_name(path: str | Path) -> str | None:
    """``path`` as FAISS's file functions take it; ``None`` for a name that is not UTF-8 (a folder named in another
    encoding: Python keeps its bytes as surrogates, which FAISS refuses with a TypeError)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return None
    return str(path)


SMALL_BATCH = 16


@contextlib.contextmanager
def _threads_for(num_queries: int):
    """One OpenMP thread for a few queries: thread start-up and spin-waits cost more than they save
    (hybrid search p50 on SciFact went from 16 ms to 4.5 ms on a busy 2-core machine)."""
    import faiss

    if num_queries >= SMALL_BATCH:
        yield
        return
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


#: the largest k (and nprobe) FAISS's GPU indexes take
GPU_MAX_K = 2048


def _to_gpu(index, device) -> tuple:
    """``(index to search, its GPU resources)``: a copy on the GPU ``device`` names (``None``: the first one), or
    ``index`` itself on the CPU (asked for, no faiss-gpu or no GPU, or an index type without a GPU version)."""
    import faiss

    device = None if device is None else str(device)
    if device is not None and not device.startswith("cuda") or not hasattr(faiss, "get_num_gpus") \
            or faiss.get_num_gpus() == 0:
        return index, None
    gpu = int(device.split(":")[1]) if device and ":" in device else 0
    try:
        resources = faiss.StandardGpuResources()
        return faiss.index_cpu_to_gpu(resources, gpu, index), resources
    except (RuntimeError, AttributeError) as exc:  # some index types have no GPU version
        logger.info("FAISS index stays on the CPU: %s", exc)
        return index, None
