"""Analyses of TAP machines: Isomap embeddings, receptive-field ranking, denoising.

Tramel, Gabrié, Manoel, Caltagirone & Krzakala (2018), "Deterministic and generalized
framework for unsupervised learning with restricted Boltzmann machines", §VII:

* :func:`fit_solution_embedding` -- Figure 6: TAP solutions [a_v, a_h] of every epoch
  mapped by one Isomap fitted to the latest epoch's solutions.
* :func:`embed_data_and_solutions` -- Figure 7: Isomap fitted to the initialising data
  (visible units), the solutions' visible magnetizations embedded in the same space.
* :func:`rank_receptive_fields` -- Figure 4: the columns of W ranked by spread (the
  l_p quasi-norm, p = 0.1) or by the mean activation of their hidden unit.
* §VII.4.1 denoising on the binary symmetric channel (Figure 8):
  :func:`binary_symmetric_channel`, :func:`channel_field` (the extra visible field D_i of
  eq. 44), :func:`ope_denoise` (the optimal pointwise estimator, eq. 46),
  :func:`nearest_neighbour_denoise` (1-NN in Hamming distance),
  :func:`matthews_corrcoef_bits` and :func:`denoising_curve`.

Sign convention (the paper's eqs. 43, 44 and 46 carry a sign slip).  For a {0, 1} pixel
seen through a BSC with flip probability p,

    log P(y_i | x_i = 1) - log P(y_i | x_i = 0) = (2 y_i - 1) log((1 - p) / p) = D_i,

so P(y | x) is proportional to exp(sum_i D_i x_i) and the OPE is
``sigm(logit(m_i) + D_i)``.  The paper prints ``ln(p / (1 - p))``, which would make the
OPE return the *complement* of the observation at p -> 0, contradicting its own text
("the OPE returns the observations in the case p = 0"); the derivation above is the one
used here and is checked against Bayes' rule by brute force in the tests.

Plain NumPy / scikit-learn; nothing here imports a UI library.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from scipy.sparse import SparseEfficiencyWarning
from scipy.special import expit, logit
from sklearn.manifold import Isomap

from .checks import check_choice, check_float, check_int
from .rbm import check_binary

#: The channel log-odds |log((1 - p) / p)| is clipped to this (it is infinite at p = 0 or 1).
#: Large enough to overrule any clipped prior (|logit| <= 13.8): sigm(-36) ~ 2e-16.
LOG_ODDS_CLIP = 50.0
#: Pixel magnetizations m are clipped to [M_CLIP, 1 - M_CLIP] before the logit of eq. 46.
M_CLIP = 1e-6
#: PCA axes (the few-solutions fallback) with a singular value below this fraction of the
#: largest are degenerate: their coordinate is 0.
EIG_RTOL = 1e-9
#: Memory bound for one chunk of the (queries x training rows) Hamming distance matrix.
HAMMING_CHUNK_BYTES = 32 * 2**20


# ------------------------------------------------------------------- validation


def _check_real(X: Any, name: str, owner: str, *, ndim: int = 2, n_cols: int | None = None,
                min_rows: int = 1, low: float | None = None, high: float | None = None) -> np.ndarray:
    """X as a float64 array of the given ndim, finite (and within [low, high]), or a ValueError."""
    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"The '{name}' parameter of {owner} must be a numeric array. Got {type(X).__name__}.") from None
    what = (f"a 2-d array with >= {min_rows} rows and >= 1 column" if ndim == 2
            else f"a 1-d array with >= {min_rows} entries")
    if A.ndim != ndim or A.shape[0] < min_rows or (ndim == 2 and A.shape[1] < 1):
        raise ValueError(f"The '{name}' parameter of {owner} must be {what}. Got shape {A.shape}.")
    if n_cols is not None and A.shape[-1] != n_cols:
        raise ValueError(f"The '{name}' parameter of {owner} must have {n_cols} "
                         f"{'columns' if ndim == 2 else 'entries'}. Got {A.shape[-1]}.")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"The '{name}' parameter of {owner} must be finite. Got NaN or inf.")
    if A.size and ((low is not None and A.min() < low) or (high is not None and A.max() > high)):
        raise ValueError(f"The '{name}' parameter of {owner} must hold values in [{low}, {high}]. "
                         f"Got values in [{A.min():g}, {A.max():g}].")
    return np.ascontiguousarray(A)


def _check_p(p: Any, owner: str) -> float:
    return check_float("p", p, owner, 0.0, 1.0, high_open=False)


# ------------------------------------------------------------- Isomap embeddings


@dataclass(frozen=True)
class SolutionEmbedding:
    """Per-epoch 2-D (``n_components``-D) coordinates of TAP solutions (Figure 6).

    ``coords[e]`` has shape (n_e, n_components), one row per solution of epoch e (in the
    given order).  ``fit_epoch`` is the epoch the map was fitted on, ``method`` is
    'isomap' or 'pca' (the fallback for too few distinct solutions), ``n_neighbors`` the
    neighbourhood size actually used (0 for 'pca'), ``n_fit`` the number of distinct
    rows fitted, ``model`` the fitted :class:`sklearn.manifold.Isomap` (None for 'pca').
    """

    coords: list[np.ndarray]
    fit_epoch: int
    method: str
    n_neighbors: int
    n_fit: int
    model: Isomap | None


@dataclass(frozen=True)
class DataSolutionEmbedding:
    """Initialising data and TAP solutions in one Isomap space (Figure 7).

    ``data_coords[k]`` is the position of data row ``data_index[k]`` (the fitted subsample,
    in increasing row order); ``solution_coords`` has one row per solution.  ``method``,
    ``n_neighbors``, ``n_fit`` and ``model`` are as in :class:`SolutionEmbedding`.
    """

    data_coords: np.ndarray
    data_index: np.ndarray
    solution_coords: np.ndarray
    method: str
    n_neighbors: int
    n_fit: int
    model: Isomap | None


class _Map:
    """A fitted map from rows to ``n_components`` coordinates: Isomap, or PCA with few rows.

    Fitted on *distinct* rows (duplicates would give zero-length graph edges).  Isomap
    needs more distinct rows than components; with fewer (1 or 2 solutions for a 2-D map)
    a PCA centred on the fitted rows is used, which maps one row to the origin and two rows
    to +-d/2 on the first axis (their geodesic distance is the Euclidean one).
    ``n_neighbors`` is reduced to n_fit - 1 when there are not enough rows.  A row equal to
    a fitted row gets exactly its fitted coordinates; other rows go through
    ``Isomap.transform`` (their nearest fitted neighbours plus geodesic distances).  The
    lookup matters for binary rows: with tied neighbour distances, ``transform`` of a
    fitted row may pick a different k-th neighbour than the fitted graph and land far
    from the row's fitted position (seen on binarised MNIST).
    """

    def __init__(self, X_fit: np.ndarray, n_neighbors: int, n_components: int):
        n, d = X_fit.shape
        self.model: Isomap | None = None
        if n <= n_components:
            self.method, self.n_neighbors = "pca", 0
            self._mean = X_fit.mean(axis=0)
            _, s, Vt = np.linalg.svd(X_fit - self._mean, full_matrices=False)
            live = s > EIG_RTOL * s.max() if s.size and s.max() > 0 else np.zeros(s.shape, bool)
            self._axes = np.zeros((d, n_components))
            r = min(int(live.sum()), n_components)
            self._axes[:, :r] = Vt[:r].T
            embedding = (X_fit - self._mean) @ self._axes
        else:
            self.method, self.n_neighbors = "isomap", min(n_neighbors, n - 1)
            self.model = Isomap(n_neighbors=self.n_neighbors, n_components=n_components)
            with warnings.catch_warnings():
                # A disconnected neighbour graph is completed by scikit-learn; say nothing.
                warnings.filterwarnings("ignore", message="The number of connected components",
                                        category=UserWarning)
                warnings.filterwarnings("ignore", category=SparseEfficiencyWarning)
                embedding = self.model.fit_transform(X_fit)
            # (scikit-learn zeroes eigenvalues below 1e-12 of the largest, e.g. for collinear
            # rows, and transform() then gives 0 on that axis.)
            embedding = np.array(embedding, dtype=np.float64)
        self.embedding = embedding
        self._lookup = {row.tobytes(): k for k, row in enumerate(X_fit + 0.0)}  # + 0.0: -0.0 -> 0.0

    def __call__(self, X: np.ndarray) -> np.ndarray:
        if len(X) == 0:
            return np.zeros((0, self.embedding.shape[1]))
        if self.model is None:
            out = (X - self._mean) @ self._axes
        else:
            out = np.array(self.model.transform(X), dtype=np.float64)
        for i, row in enumerate(X + 0.0):
            k = self._lookup.get(row.tobytes())
            if k is not None:
                out[i] = self.embedding[k]
        return out


def _subsample(n: int, max_fit: int, seed: int) -> np.ndarray:
    """All of range(n), or ``max_fit`` of them drawn without replacement by default_rng(seed), sorted."""
    if n <= max_fit:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_fit, replace=False))


def _check_embedding_args(owner: str, n_neighbors: Any, n_components: Any, max_fit: Any, seed: Any) -> tuple[int, int, int, int]:
    return (check_int("n_neighbors", n_neighbors, owner, 1), check_int("n_components", n_components, owner, 1),
            check_int("max_fit", max_fit, owner, 2), check_int("seed", seed, owner, 0))


def fit_solution_embedding(solutions_by_epoch: Sequence[Any], n_neighbors: int = 10, n_components: int = 2,
                           *, max_fit: int = 1000, seed: int = 0) -> SolutionEmbedding:
    """Map the TAP solutions of every epoch with one Isomap fitted on the latest (Figure 6).

    Parameters
    ----------
    solutions_by_epoch
        One 2-d array per epoch, oldest first, each (n_e, Nv + Nh): rows are solutions
        [a_v, a_h], the visible and hidden magnetizations concatenated (as in Figure 6).
        Every epoch has the same number of columns; an epoch may have no rows.
    n_neighbors, n_components
        Isomap's neighbourhood size and output dimension.
    max_fit, seed
        The map is fitted on the distinct solutions of the latest non-empty epoch; if there
        are more than ``max_fit`` of them, on ``max_fit`` drawn by
        ``numpy.random.default_rng(seed)`` (so the same inputs give the same map).

    Returns
    -------
    SolutionEmbedding
        ``coords[e]`` for every epoch.  Isomap is fitted with ``min(n_neighbors, n_fit - 1)``
        neighbours; with ``n_fit <= n_components`` distinct solutions (e.g. the single TAP
        solution early in training) it cannot be fitted and a PCA of those rows is used
        (``method == 'pca'``; with a single solution every row maps to the origin).
        Earlier epochs go through ``Isomap.transform``; exact duplicates of fitted rows
        get exactly their fitted coordinates.  With arpack (> 200 rows) the coordinates
        are reproducible up to the eigen-solver's rounding, not bit for bit.
    """
    owner = "fit_solution_embedding"
    n_neighbors, n_components, max_fit, seed = _check_embedding_args(owner, n_neighbors, n_components, max_fit, seed)
    if not isinstance(solutions_by_epoch, (list, tuple)) or len(solutions_by_epoch) == 0:
        raise ValueError(f"The 'solutions_by_epoch' parameter of {owner} must be a non-empty list of 2-d arrays "
                         f"(one per epoch). Got {type(solutions_by_epoch).__name__} {solutions_by_epoch!r:.60}.")
    epochs = []
    for e, S in enumerate(solutions_by_epoch):
        n_cols = epochs[0].shape[1] if epochs else None
        epochs.append(_check_real(S, f"solutions_by_epoch[{e}]", owner, n_cols=n_cols, min_rows=0))
    fit_epoch = max((e for e, S in enumerate(epochs) if len(S)), default=None)
    if fit_epoch is None:
        raise ValueError(f"The 'solutions_by_epoch' parameter of {owner} must have at least one solution "
                         "in some epoch. Got only empty epochs.")
    distinct = np.unique(epochs[fit_epoch], axis=0)
    X_fit = distinct[_subsample(len(distinct), max_fit, seed)]
    fmap = _Map(X_fit, n_neighbors, n_components)
    return SolutionEmbedding([fmap(S) for S in epochs], fit_epoch, fmap.method, fmap.n_neighbors,
                             len(X_fit), fmap.model)


def embed_data_and_solutions(data_vis: Any, solutions_vis: Any, n_neighbors: int = 10, n_components: int = 2,
                             *, max_fit: int = 1000, seed: int = 0) -> DataSolutionEmbedding:
    """Fit Isomap on the initialising data and embed the TAP solutions there (Figure 7).

    Parameters
    ----------
    data_vis
        (n, Nv) data rows that initialised the TAP iterations (visible units only).
    solutions_vis
        (n_solutions, Nv) visible magnetizations a_v of the TAP solutions (may be empty).
    n_neighbors, n_components
        Isomap's neighbourhood size and output dimension.
    max_fit, seed
        If there are more than ``max_fit`` data rows, the map is fitted on ``max_fit`` of
        them drawn by ``numpy.random.default_rng(seed)`` (returned as ``data_index``).
        Fitting is the costly part (k-NN graph, shortest paths, eigenvectors), roughly
        quadratic in the rows: 1,000 rows of 784 pixels take about a second on 2 cores.

    Returns
    -------
    DataSolutionEmbedding
        Coordinates of the fitted data rows (duplicate rows share one position) and of
        every solution (``Isomap.transform``).  Too few distinct data rows fall back to
        PCA and ``n_neighbors`` is reduced as in :func:`fit_solution_embedding`.
    """
    owner = "embed_data_and_solutions"
    data_map = DataMap(data_vis, n_neighbors, n_components, max_fit=max_fit, seed=seed, owner=owner)
    return data_map.embed(solutions_vis, owner=owner)


class DataMap:
    """An Isomap fitted once on the initialising data (Figure 7), to embed the TAP
    solutions of any epoch in the same space without refitting (the costly part).
    Arguments as :func:`embed_data_and_solutions`."""

    def __init__(self, data_vis: Any, n_neighbors: int = 10, n_components: int = 2, *, max_fit: int = 1000,
                 seed: int = 0, owner: str = "DataMap") -> None:
        n_neighbors, n_components, max_fit, seed = _check_embedding_args(owner, n_neighbors, n_components, max_fit,
                                                                         seed)
        data = _check_real(data_vis, "data_vis", owner)
        self.n_visible = data.shape[1]
        self.data_index = _subsample(len(data), max_fit, seed)
        distinct, inverse = np.unique(data[self.data_index], axis=0, return_inverse=True)
        self._map = _Map(distinct, n_neighbors, n_components)
        self.data_coords = self._map.embedding[inverse.reshape(-1)]
        self.n_fit = len(distinct)

    def embed(self, solutions_vis: Any, *, owner: str = "DataMap.embed") -> DataSolutionEmbedding:
        """The data coordinates with the solutions' coordinates in the same space."""
        sols = _check_real(solutions_vis, "solutions_vis", owner, n_cols=self.n_visible, min_rows=0)
        fmap = self._map
        return DataSolutionEmbedding(self.data_coords, self.data_index, fmap(sols), fmap.method, fmap.n_neighbors,
                                     self.n_fit, fmap.model)


# ------------------------------------------------------ receptive-field ranking


def lp_spread(W: Any, p: float = 0.1) -> np.ndarray:
    """The l_p quasi-norm of every column of W, (sum_i |W_ij|^p)^(1/p), shape (Nh,) (Figure 4).

    For p < 1 it grows with the number of non-negligible weights (as p -> 0,
    sum |w|^p counts the non-zeros), so a small value means a localized receptive field.
    It is homogeneous of degree 1 (scaling a column scales its value), as the paper's
    measure is.  Computed as exp(log(sum |w|^p) / p); an all-zero column gives 0.
    """
    owner = "lp_spread"
    W = _check_real(W, "W", owner)
    p = check_float("p", p, owner, 0.0, low_open=True)
    s = np.sum(np.abs(W) ** p, axis=0)
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(s > 0, np.exp(np.log(s) / p), 0.0)


def rank_receptive_fields(W: Any, hidden_means: Any = None, by: str = "spread",
                          p: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Rank the receptive fields (columns of W, shape (Nv, Nh)) as in Figure 4.

    Parameters
    ----------
    W
        Weights (Nv, Nh); column j is hidden unit j's receptive field.
    hidden_means
        (Nh,) mean activation of each hidden unit over the data, needed for
        ``by='activation'``; for binary hidden units
        ``RBM(W, b_vis, b_hid).prob_h_given_v(X).mean(axis=0)``.
    by
        'spread': by the l_p quasi-norm ``(sum_i |W_ij|^p)^(1/p)`` (:func:`lp_spread`),
        ascending: most localized first, most spread last.  'activation': by
        ``hidden_means``, descending: most active first.
    p
        The exponent of the quasi-norm, > 0 (the paper uses 0.1).  The 1/p power does not
        change the order.

    Returns
    -------
    order, scores
        ``order`` (Nh,) int64 column indices, best first (ties keep index order);
        ``scores`` (Nh,) the score of each column in the original column order.
    """
    owner = "rank_receptive_fields"
    W = _check_real(W, "W", owner)
    by = check_choice("by", by, owner, ("spread", "activation"))
    p = check_float("p", p, owner, 0.0, low_open=True)
    if by == "spread":
        scores = lp_spread(W, p)
        return np.argsort(scores, kind="stable").astype(np.int64), scores
    if hidden_means is None:
        raise ValueError(f"The 'hidden_means' parameter of {owner} is required with by='activation': "
                         f"an array of {W.shape[1]} mean hidden activations. Got None.")
    scores = _check_real(hidden_means, "hidden_means", owner, ndim=1, n_cols=W.shape[1])
    return np.argsort(-scores, kind="stable").astype(np.int64), scores


# -------------------------------------------------------------------- denoising


def binary_symmetric_channel(X: Any, p: float, seed: int) -> np.ndarray:
    """Flip every bit of the binary array X independently with probability p (§VII.4.1, eq. 43).

    Draws ``U = default_rng(seed).random(X.shape)`` and flips where ``U < p``, so the same
    seed gives nested flips across p: every bit flipped at p is also flipped at any p' > p
    (common random numbers, which makes denoising curves smooth in p).  Returns float64.
    """
    owner = "binary_symmetric_channel"
    X = check_binary(X, "X", owner)
    p = _check_p(p, owner)
    seed = check_int("seed", seed, owner, 0)
    flips = np.random.default_rng(seed).random(X.shape) < p
    return np.where(flips, 1.0 - X, X)


def _channel_log_odds(p: float) -> float:
    """log((1 - p) / p), clipped to +-LOG_ODDS_CLIP (infinite at p = 0 and p = 1)."""
    if p <= 0.0:
        return LOG_ODDS_CLIP
    if p >= 1.0:
        return -LOG_ODDS_CLIP
    return float(np.clip(math.log1p(-p) - math.log(p), -LOG_ODDS_CLIP, LOG_ODDS_CLIP))


def channel_field(Y: Any, p: float) -> np.ndarray:
    """The extra visible field the channel adds to each {0, 1} pixel's prior (eq. 44).

    D_i = log P(y_i | x_i = 1) - log P(y_i | x_i = 0) = (2 y_i - 1) log((1 - p) / p), so
    P(y | x) is proportional to exp(sum_i D_i x_i) and the posterior of an RBM with
    visible bias b is an RBM with visible bias b + D (eq. 45, §VII.4.1).  (The paper
    prints ln(p / (1 - p)); see the module docstring.)  The log-odds is clipped to
    +-LOG_ODDS_CLIP = 50, so p = 0 gives a large finite field (the observation is
    pinned) and p = 0.5 gives exactly 0.  Y is (n, Nv) binary; returns (n, Nv) float64.
    """
    owner = "channel_field"
    Y = check_binary(Y, "Y", owner)
    return (2.0 * Y - 1.0) * _channel_log_odds(_check_p(p, owner))


def ope_denoise(Y: Any, m: Any, p: float) -> np.ndarray:
    """The optimal pointwise estimator P(x_i = 1 | y_i) under a factorized prior (eq. 46).

    With prior P(x) = prod_i m_i^x_i (1 - m_i)^(1 - x_i) the posterior factorizes and

        P(x_i = 1 | y_i) = sigm(logit(m_i) + (2 y_i - 1) log((1 - p) / p)).

    ``m`` (Nv,) are the empirical pixel magnetizations (e.g. ``X_train.mean(axis=0)``),
    clipped to [M_CLIP, 1 - M_CLIP] = [1e-6, 1 - 1e-6] so pixels never seen on (or off)
    in training have a finite logit; the channel log-odds is clipped as in
    :func:`channel_field`.  Hence p = 0 returns the observation Y (to ~1e-16) and
    p = 0.5 returns the clipped prior m.  Y is (n, Nv) binary; returns (n, Nv) float64 soft
    estimates in [0, 1].
    """
    owner = "ope_denoise"
    Y = check_binary(Y, "Y", owner)
    m = _check_real(m, "m", owner, ndim=1, n_cols=Y.shape[1], low=0.0, high=1.0)
    prior = logit(np.clip(m, M_CLIP, 1.0 - M_CLIP))
    return expit(prior + channel_field(Y, _check_p(p, owner)))


def nearest_neighbour_denoise(Y: Any, X_train: Any, *, return_index: bool = False,
                              chunk_bytes: int = HAMMING_CHUNK_BYTES) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Replace each noisy row by its nearest training row in Hamming distance (1-NN, Figure 8).

    For binary rows, Hamming(y, x) = |y| + |x| - 2 y.x, so all distances of a chunk of
    queries come from one float32 matrix product (exact for < 2^24 pixels).  Queries are
    processed in chunks whose distance matrix takes at most ``chunk_bytes`` bytes.  Ties go
    to the lowest training index.  Returns the estimates (n, Nv) float64, and with
    ``return_index`` also the chosen training rows (n,) int64.
    """
    owner = "nearest_neighbour_denoise"
    X_train = check_binary(X_train, "X_train", owner)
    Y = check_binary(Y, "Y", owner, n_visible=X_train.shape[1])
    chunk_bytes = check_int("chunk_bytes", chunk_bytes, owner, 1)
    Xf = X_train.astype(np.float32)
    x_norms = Xf.sum(axis=1)
    rows = max(1, chunk_bytes // (4 * len(Xf)))
    index = np.empty(len(Y), dtype=np.int64)
    for start in range(0, len(Y), rows):
        Yc = Y[start:start + rows].astype(np.float32)
        hamming = Yc.sum(axis=1)[:, None] + x_norms[None, :] - 2.0 * (Yc @ Xf.T)
        index[start:start + rows] = np.argmin(hamming, axis=1)
    estimates = X_train[index]
    return (estimates, index) if return_index else estimates


def matthews_corrcoef_bits(X_true: Any, X_estimate: Any) -> float:
    """Matthews correlation coefficient pooled over all pixels of all images (Figure 8).

    ``X_estimate`` may be soft (values in [0, 1]); it is thresholded as ``>= 0.5 -> 1``.
    The confusion counts are pooled over every pixel of every row, and
    MCC = (TP TN - FP FN) / sqrt((TP + FP)(TP + FN)(TN + FP)(TN + FN)), which is 0 when
    the denominator is 0 (all truths or all estimates one value), as in scikit-learn.
    """
    owner = "matthews_corrcoef_bits"
    truth = check_binary(X_true, "X_true", owner).astype(bool)
    est = _check_real(X_estimate, "X_estimate", owner, low=0.0, high=1.0)
    if est.shape != truth.shape:
        raise ValueError(f"The 'X_estimate' parameter of {owner} must have the shape of X_true {truth.shape}. "
                         f"Got {est.shape}.")
    pred = est >= 0.5
    tp = float(np.count_nonzero(truth & pred))
    tn = float(np.count_nonzero(~truth & ~pred))
    fp = float(np.count_nonzero(~truth & pred))
    fn = float(np.count_nonzero(truth & ~pred))
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if denominator == 0.0:
        return 0.0
    return float((tp * tn - fp * fn) / math.sqrt(denominator))


TapDenoiser = Callable[[np.ndarray, float], np.ndarray]


def denoising_curve(X_clean: Any, X_train: Any, ps: Sequence[float], seed: int,
                    tap_denoiser: TapDenoiser | None = None) -> dict[str, list]:
    """MCC of TAP, OPE and 1-NN denoising against the flip probability p (Figure 8).

    For each p in ``ps``: ``Y = binary_symmetric_channel(X_clean, p, seed)`` (the same
    seed for every p, so the flips are nested in p and every method sees the same noise);
    the OPE uses the magnetizations ``X_train.mean(axis=0)``; the 1-NN searches
    ``X_train``; ``tap_denoiser(Y, p)`` (optional) returns soft estimates in [0, 1] of
    shape Y.shape -- e.g. TAP inference with the extra visible field
    :func:`channel_field` (Y, p), initialised at the OPE as in §VII.4.1.  Each estimate
    is scored with :func:`matthews_corrcoef_bits` against ``X_clean``.

    Returns ``{'p': [...], 'mcc_tap': [...], 'mcc_ope': [...], 'mcc_1nn': [...]}``, lists
    of equal length; ``mcc_tap`` holds None when no ``tap_denoiser`` is given.
    """
    owner = "denoising_curve"
    X_clean = check_binary(X_clean, "X_clean", owner)
    X_train = check_binary(X_train, "X_train", owner, n_visible=X_clean.shape[1])
    seed = check_int("seed", seed, owner, 0)
    if isinstance(ps, (str, bytes)) or np.ndim(ps) != 1 or len(ps) == 0:
        raise ValueError(f"The 'ps' parameter of {owner} must be a non-empty 1-d sequence of flip "
                         f"probabilities in [0, 1]. Got {ps!r}.")
    ps = [check_float("ps", q, owner, 0.0, 1.0, high_open=False) for q in ps]
    if tap_denoiser is not None and not callable(tap_denoiser):
        raise ValueError(f"The 'tap_denoiser' parameter of {owner} must be a callable (Y, p) -> estimates "
                         f"or None. Got {type(tap_denoiser).__name__}.")
    m = X_train.mean(axis=0)
    out: dict[str, list] = {"p": [], "mcc_tap": [], "mcc_ope": [], "mcc_1nn": []}
    for p in ps:
        Y = binary_symmetric_channel(X_clean, p, seed)
        out["p"].append(p)
        out["mcc_ope"].append(matthews_corrcoef_bits(X_clean, ope_denoise(Y, m, p)))
        out["mcc_1nn"].append(matthews_corrcoef_bits(X_clean, nearest_neighbour_denoise(Y, X_train)))
        if tap_denoiser is None:
            out["mcc_tap"].append(None)
            continue
        estimate = _check_real(tap_denoiser(Y.copy(), p), "tap_denoiser(Y, p)", owner, low=0.0, high=1.0)
        if estimate.shape != Y.shape:
            raise ValueError(f"The 'tap_denoiser' parameter of {owner} must return an array of shape {Y.shape}. "
                             f"Got {estimate.shape}.")
        out["mcc_tap"].append(matthews_corrcoef_bits(X_clean, estimate))
    return out


def tap_denoiser(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, *, damping: float = 0.5,
                 max_iter: int = 2000):
    """The TAP posterior-mean denoiser of §VII.4 for a binary {0, 1} RBM, as a callable
    ``(Y, p) -> soft estimates`` for :func:`denoising_curve`.

    For each noisy row y it runs TAP inference (Algorithm 1) with the channel field
    :func:`channel_field` (y, p) added to the visible prior (eq. 47), starting at y itself
    (inside the well of that field, as the paper does), and returns the visible
    magnetizations a_v = <x_i>.  Chains that do not converge within ``max_iter`` sweeps
    return their last iterate.
    """
    from . import tap  # deferred: tap imports the kernels, this module stays light

    def denoise(Y: np.ndarray, p: float) -> np.ndarray:
        Y = np.asarray(Y, dtype=np.float64)
        result = tap.tap_fixed_points(W, b_vis, b_hid, Y, field_vis=channel_field(Y, p), damping=damping,
                                      max_iter=max_iter)
        return np.clip(result.a_vis, 0.0, 1.0)

    return denoise
