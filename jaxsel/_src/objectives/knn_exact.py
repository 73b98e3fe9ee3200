"""The exact top-m cosine graph on the host: blocked BLAS matmuls with each tile's top-m
candidates picked by thresholds, for large N on CPU.

Shape legend: n valid items, D embedding dimension, m neighbours kept per item, b tile side.

Every similarity `s_ij` is computed once, as tile `E_I @ E_J.T` (`I <= J`, so half the
`O(n²·D)` product of a full `E @ E.T`), and offered to both row i and row j. A pair is kept
only when it reaches the row's threshold, a lower bound on the row's final m-th value (the m-th
largest of m real similarities of that row), so the selection reads each tile with two
vectorised comparisons and keeps a few dozen candidates per row. The thresholds come from the
diagonal tiles after a locality ordering (items sorted by their nearest of a few k-means
centroids: the diagonal tile then holds most of a row's neighbours, so its bound is nearly
final); merges of the candidates raise them further. The ordering changes only the speed: the
result is the exact top-m of the float32 similarities, ties to the lowest index.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tqdm.auto import tqdm

_GROUP = 16  # strided groups whose maxima bound a diagonal tile's m-th value
_CENTROIDS_PER_TILE = 4  # locality ordering: clusters per tile side
_LLOYD_STEPS = 4
_SAMPLE_PER_CENTROID = 64


def transform(s: np.ndarray, nonneg: str) -> np.ndarray:
  """`jaxsel.nonnegative(s, method=nonneg)` in place on a host array (the same float ops)."""
  if nonneg == "clip":
    np.maximum(s, 0, out=s)
  elif nonneg == "shift":
    s += 1
    s *= 0.5  # (x + 1) / 2 exactly: halving is exact in binary floating point
  elif nonneg == "square":
    np.multiply(s, s, out=s)
  else:
    raise ValueError(f"unknown nonneg method {nonneg!r}")
  return s


def unit_rows(e: np.ndarray, rows: np.ndarray) -> np.ndarray:
  """`e[rows]` scaled to unit length, a new float32 array (as `jaxsel.nonnegative`'s
  caller `l2_normalize` scales: a zero row stays zero)."""
  out = np.asarray(e[rows], np.float32)
  out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
  return out


def locality_order(e: np.ndarray, rows: np.ndarray, tile: int, seed: int = 0) -> np.ndarray:
  """A permutation `[n]` of `rows` positions grouping similar rows of `e`: sorted by their
  nearest of `~4·n/tile` centroids (a few Lloyd steps of spherical k-means on a sample)."""
  n = len(rows)
  c = min(n, max(1, _CENTROIDS_PER_TILE * -(-n // tile)))
  if n <= tile or c < 2:
    return np.arange(n)
  rng = np.random.default_rng(seed)
  picked = rng.choice(n, min(n, c * _SAMPLE_PER_CENTROID), replace=False)
  sample = unit_rows(e, rows[np.sort(picked)])
  centers = sample[rng.choice(len(sample), c, replace=False)].copy()
  for _ in range(_LLOYD_STEPS):
    near = np.argmax(sample @ centers.T, axis=1)
    sums = np.zeros_like(centers)
    np.add.at(sums, near, sample)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    centers = np.where(norms > 0, sums / np.maximum(norms, 1e-30), centers)
  # A row's nearest centroid does not depend on its length: no normalised copy of all rows.
  near = np.concatenate([np.argmax(e[rows[i:i + 8192]] @ centers.T, axis=1)
                         for i in range(0, n, 8192)])
  return np.argsort(near, kind="stable")


class _TopM:
  """Candidates `(row, col, value)` gathered in chunks and reduced to each row's best m:
  value descending, then column ascending."""

  def __init__(self, n: int, m: int, cols: np.ndarray, dtype):
    self.n, self.m, self.cols = n, m, cols  # cols: the id that breaks ties, per column
    self.rows, self.col, self.val = [], [], []
    self.size = 0
    self.value = np.full((n, m), -np.inf, dtype)  # [n, m] best so far, -inf: empty
    self.index = np.full((n, m), -1, np.int64)  # [n, m] positions (columns), -1: empty

  def add(self, rows, cols, vals) -> None:
    self.rows.append(rows.astype(np.int32))
    self.col.append(cols.astype(np.int32))
    self.val.append(vals)
    self.size += len(rows)

  def merge(self) -> np.ndarray:
    """Folds the candidates into the best m per row; returns the rows' m-th values `[n]`."""
    if self.size:
      rows = np.unique(np.concatenate(self.rows))
      keep = self.index[rows] >= 0
      r = np.concatenate([np.broadcast_to(rows[:, None], keep.shape)[keep]] + self.rows)
      c = np.concatenate([self.index[rows][keep].astype(np.int32)] + self.col)
      v = np.concatenate([self.value[rows][keep]] + self.val)
      self.rows, self.col, self.val, self.size = [], [], [], 0
      self.value[rows] = -np.inf
      self.index[rows] = -1
      # One sort key: row (high bits), then value descending (the bits of a non-negative
      # float order like its value); the column's tie-break id sorts first, stably.
      v = v + 0  # -0.0 -> +0.0
      bits = v.astype(np.float32).view(np.uint32)
      key = ((r.astype(np.uint64) << np.uint64(32))
             | (np.uint32(0xFFFFFFFF) - bits).astype(np.uint64))
      o = np.argsort(self.cols[c], kind="stable")
      o = o[np.argsort(key[o], kind="stable")]
      r, c, v = r[o], c[o], v[o]
      first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
      rank = np.arange(len(r)) - np.repeat(first, np.diff(np.r_[first, len(r)]))
      top = rank < self.m
      self.value[r[top], rank[top]] = v[top]
      self.index[r[top], rank[top]] = c[top]
    return self.value[:, -1]


class _Selection:
  """The selection half of the build: tiles offered in order (every diagonal tile first),
  candidates kept, thresholds raised. Runs on one thread while the next tile multiplies."""

  def __init__(self, n: int, m: int, perm: np.ndarray, nonneg: str, dtype, diagonals: int):
    self.top = _TopM(n, m, perm, dtype)
    self.m, self.nonneg, self.diagonals = m, nonneg, diagonals
    self.thr = np.full(n, -np.inf, dtype)  # [n] lower bounds of each row's m-th value
    self.cap = max(8 * n, 1 << 22)  # candidates held before a merge raises the thresholds
    # Off the diagonal, clipping is left to the candidates: a row with a positive threshold
    # keeps the same entries of the raw tile, one with a threshold <= 0 keeps them all.
    self.raw = nonneg == "clip"

  def _raise(self) -> None:
    thr = self.top.merge()
    self.thr = np.where(thr > 0, thr, -np.inf) if self.raw else thr

  def offer(self, s: np.ndarray, a0: int, c0: int) -> None:
    if a0 == c0:  # a diagonal tile: both halves of each pair, and the first thresholds
      transform(s, self.nonneg)
      b = s.shape[0]
      self.thr[a0:a0 + b] = _tile_bound(s, self.m)
      _offer_rows(self.top, s, self.thr[a0:a0 + b], a0, a0, s.max(axis=1))
      self.diagonals -= 1
      if not self.diagonals:
        self._raise()
      return
    if not self.raw:
      transform(s, self.nonneg)
    b, w = s.shape
    rows, cols = self.thr[a0:a0 + b], self.thr[c0:c0 + w]
    # Column maxima are the cheap reduction (a running maximum over rows); their maximum
    # skips the row maxima of a tile that holds nothing for its rows, as most tiles far
    # from the diagonal do.
    colmax = s.max(axis=0)
    if colmax.max() >= rows.min():
      _offer_rows(self.top, s, rows, a0, c0, s.max(axis=1), clip=self.raw)
    _offer_rows(self.top, s.T, cols, c0, a0, colmax, clip=self.raw)
    if self.top.size > self.cap:
      self._raise()


def exact_top_m(e: np.ndarray, rows: np.ndarray, m: int, nonneg: str, *, tile: int,
                progress: bool, order: bool = True):
  """Exact top-`m` neighbours of each of the rows `rows` `[n]` (increasing) of `e` `[N, D]`
  among those rows, by cosine similarity (rows normalised here, in one float32 copy).

  Returns:
    `(index [n, m] int64, value [n, m])`: positions in `rows` of row j's neighbours by
    `nonnegative(cos(e_j, e_i))` descending, ties to the lowest i; `-1` / `-inf` where n < m.
  """
  n = len(rows)
  perm = locality_order(e, rows, tile) if order else np.arange(n)
  ep = unit_rows(e, rows[perm])
  bounds = [(t * tile, min(n, (t + 1) * tile)) for t in range(-(-n // tile))]
  tiles = [(b, b) for b in bounds] + [(b, c) for i, b in enumerate(bounds) for c in bounds[i + 1:]]
  sel = _Selection(n, m, perm, nonneg, ep.dtype, len(bounds))
  with tqdm(total=len(tiles), desc="exact kNN graph", unit="tile", disable=not progress) as bar, \
       ThreadPoolExecutor(1) as pool:
    pending = None
    for (a0, a1), (c0, c1) in tiles:
      s = ep[a0:a1] @ ep[c0:c1].T  # BLAS, all cores; the previous tile's selection meanwhile
      if pending is not None:
        pending.result()
        bar.update()
      pending = pool.submit(sel.offer, s, a0, c0)
    if pending is not None:
      pending.result()
      bar.update()
  sel.top.merge()
  index = np.full((n, m), -1, np.int64)
  value = np.full((n, m), -np.inf, ep.dtype)
  index[perm] = np.where(sel.top.index >= 0, perm[np.maximum(sel.top.index, 0)], -1)
  value[perm] = sel.top.value
  return index, value


def _tile_bound(s: np.ndarray, m: int) -> np.ndarray:
  """A lower bound `[b]` of each row's m-th value in the tile `s` `[b, w]`: the m-th largest
  maximum of disjoint strided column groups (m distinct entries reach it)."""
  b, w = s.shape
  if w < m:
    return np.full(b, -np.inf, s.dtype)
  g = max(1, min(_GROUP, w // m))
  groups = w // g
  gmax = s[:, :groups * g].reshape(b, g, groups).max(axis=1)
  return np.partition(gmax, groups - m, axis=1)[:, groups - m]


def _offer_rows(top: _TopM, s: np.ndarray, thr: np.ndarray, r0: int, c0: int, rowmax: np.ndarray,
                *, clip: bool = False) -> None:
  """Offers the entries of tile `s` `[b, w]` (rows from r0, columns from c0) that reach their
  row's threshold `thr` `[b]`; only rows whose maximum `rowmax` `[b]` reaches it are compared
  entrywise (a transposed view offers the tile to its columns)."""
  live = np.flatnonzero(rowmax >= thr)
  if not len(live):
    return
  sub = s[live]
  hit = np.flatnonzero(sub >= thr[live, None])
  i, j = np.divmod(hit, s.shape[1])
  v = sub.reshape(-1)[hit]
  top.add(live[i] + r0, j + c0, np.maximum(v, 0) if clip else v)
