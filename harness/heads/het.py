"""Heteroscedastic classification heads: HET (Collier et al., CVPR 2021) and HET-XL.

A :class:`HeteroscedasticHead` replaces a classifier's final ``nn.Linear``. It models latent
utilities u(x) ~ N(μ(x), Σ(x)) with Σ(x) = V(x)V(x)ᵀ + diag(d(x)²) (paper Sec. 3, Eq. 3-7) and
returns logits whose softmax / sigmoid is the Monte Carlo averaged tempered probability, so the
usual ``F.cross_entropy`` / ``F.binary_cross_entropy_with_logits`` is the NLL of that average.

Variants (``covariance``; the registry :data:`~harness.heads.variants.VARIANTS` holds each one's layers):
    ``"none"``                 homoscedastic baseline, exactly a linear layer (logits μ(x)/τ);
    ``"diagonal"``             Σ = diag(d²) (Collier et al. 2020);
    ``"low_rank"``             V(x) from a D -> W·R layer (the paper's full HET);
    ``"parameter_efficient"``  V(x) = diag(v(x)) V, v from a D -> W layer, V input-independent (PE).
Noise lives on the logits (``noise_space="logits"``, W = K) or on the pre-logits
(``"pre_logits"``, W = D: HET-XL, Collier, Jenatton et al. 2023), where it is pushed through
the class weights shared with μ.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.heads.checks import (
    FixedOptions,
    check_live_options,
    check_mc_samples,
    check_sampling_options,
    check_seed,
    check_sizes,
    checked_temperature_bounds,
    register_fixed_temperature,
    resolved_num_factors,
)
from harness.heads.chunk import NoiseLayout, autocast_dtype, chunk_logits, full_precision
from harness.heads.covariance import covariance_block, noise_factors
from harness.heads.noise import EVAL_NOISE
from harness.heads.options import (
    DEFAULT_TEMPERATURE_BOUNDS,
    DIAG_NOISES,
    INITS,
    LINKS,
    MAX_DENSE_COVARIANCE_ELEMENTS,
    MIN_SCALE,
    NOISE_SPACES,
    _choice,
    check_option_types,
    check_unused_options,
    init_parameters,
)
from harness.heads.sampling import log_average_to_logits, monte_carlo_log_average, plan_noise
from harness.heads.variants import VARIANTS, CovarianceVariant


class HeteroscedasticHead(FixedOptions, nn.Module):
    """Drop-in replacement of a classifier's last linear layer with heteroscedastic noise.

    Args:
        in_features: D, width of the input features.
        num_classes: K, number of classes (softmax) or outputs (sigmoid).
        covariance: ``"none" | "diagonal" | "low_rank" | "parameter_efficient"``, or a variant added with
            :func:`~harness.heads.variants.register_variant`.
        link: ``"softmax"`` (multiclass) or ``"sigmoid"`` (multilabel).
        num_factors: R, rank of the low-rank part of ``low_rank`` and ``parameter_efficient``,
            1 <= R <= W (W = K, or D for HET-XL); None: min(15, W), the paper's ImageNet rank.
            Refused by ``none`` and ``diagonal``, which have no factors (leave it None there). Every option that
            a configuration does not read is refused likewise when given (see Raises).
        temperature: fixed τ > 0 dividing the logit samples (paper Eq. 6); None: 1. With
            ``learn_temperature``, where the learned τ starts (strictly inside ``temperature_bounds``).
        learn_temperature: learn τ = lo + (hi - lo)·sigmoid(t); t starts at 0, i.e. τ at the midpoint of
            ``temperature_bounds`` (edward2 ``tune_temperature``; HET-XL), unless ``temperature`` is given.
        temperature_bounds: (lo, hi) with 0 < lo < hi, used when ``learn_temperature``.
        noise_space: ``"logits"`` (HET) or ``"pre_logits"`` (HET-XL).
        train_mc_samples, eval_mc_samples: S in training / evaluation mode (>= 1).
        share_samples_across_batch: one noise draw per sample, broadcast over the batch (in
            training, and in evaluation with ``eval_seed=None``; a seeded evaluation always
            shares, see below).
        mc_chunk_size: samples processed at once (None: about 1M elements per chunk). Peak memory
            of a forward+backward scales with it, not with S.
        eval_seed: noise seed in evaluation mode (default 0). A seeded evaluation (``eval_seed``,
            or ``seed=`` in a call, in ``eval()`` mode) draws one noise bank, ε_1..ε_S, shared by
            every row and chunked over samples independently of the batch size, so an
            example's output depends only on the example, the seed and S: not on the batch
            size, its position in the batch or its batch mates, and repeated evaluation is
            identical. Each row's estimate p̄ is still unbiased with the same MC variance as with
            independent noise (its S samples are i.i.d. draws of u(x)); only the MC errors of
            different rows are correlated, so averages of metrics over rows carry a common MC
            error instead of averaging it out. The bank is the counter-based noise
            (:data:`~harness.heads.noise.EVAL_NOISE`) eager and under ``torch.compile`` alike, so
            both give the same outputs up to float rounding (:attr:`noise_definition`).
            None: fresh noise from torch's global RNG each call, drawn as in training (independent per row unless
            ``share_samples_across_batch``). Training always draws fresh noise from the global
            RNG, independent per row (the paper's estimator; ``torch.manual_seed`` reproduces a run).
        clip_eps: None for the exact log-space average; a float reproduces the reference's
            clipping of p̄ to [eps, 1] (softmax) or [eps, 1 - eps] (sigmoid) (edward2 ``edward2/tensorflow/layers/heteroscedastic.py``, ``eps``).
        diag_noise: ``"independent"`` (ε ~ N(0, I_W), paper and TF reference) or
            ``"shared_scalar"`` (one scalar per sample, as edward2 ``edward2/jax/nn/heteroscedastic_lib.py`` draws it).
        pe_noise_bias: keep the bias of the PE layer V (reference behaviour: the bias of edward2 ``edward2/tensorflow/layers/heteroscedastic.py``'s ``scale_layer_homoscedastic``).
        init: ``"keras"`` (glorot-uniform kernels, zero biases; TF reference), ``"flax"``
            (truncated lecun-normal kernels, zero biases; JAX reference) or ``"torch"``
            (``nn.Linear`` defaults).
        cov_init_scale: ``"flax"`` only: variance scale of the covariance layers' kernels.

    Shapes:
        input ``[..., D]`` -> logits ``[..., K]`` (any number of leading dims); on the ``meta`` device (shapes
        only) ``forward`` and ``sample_logits`` give μ(x)/τ's meta tensor of those shapes, drawing no noise.

    Raises:
        ValueError: unknown option, ``num_factors`` out of range, non-positive temperature or
            sample count, bad temperature bounds, an option given a value that this configuration does not use
            (:data:`~harness.heads.options.OPTION_USES`: sample counts on ``covariance="none"``, ``pe_noise_bias``
            off PE, ``temperature_bounds`` without ``learn_temperature``...), at call time an input whose last dim
            is not D or an option set on the head out of range (``head.clip_eps = 2``; fixed ones, at the set).
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        covariance: str = "low_rank",
        link: str = "softmax",
        num_factors: Optional[int] = None,
        temperature: Optional[float] = None,
        learn_temperature: bool = False,
        temperature_bounds: Sequence[float] = DEFAULT_TEMPERATURE_BOUNDS,
        noise_space: str = "logits",
        train_mc_samples: int = 1000,
        eval_mc_samples: int = 1000,
        share_samples_across_batch: bool = False,
        mc_chunk_size: Optional[int] = None,
        eval_seed: Optional[int] = 0,
        clip_eps: Optional[float] = None,
        diag_noise: str = "independent",
        pe_noise_bias: bool = True,
        init: str = "keras",
        cov_init_scale: Optional[float] = None,
    ) -> None:
        options = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        check_option_types(HeteroscedasticHead.__init__, options)
        super().__init__()
        self.link = _choice("link", link, LINKS)
        self.in_features, self.num_classes = check_sizes(in_features, num_classes, self.link)
        self.covariance_type = _choice("covariance", covariance, VARIANTS)
        self.noise_form = self.variant.form  # the sampler's noise form (None: no noise)
        self.noise_space = _choice("noise_space", noise_space, NOISE_SPACES)
        self.diag_noise = _choice("diag_noise", diag_noise, DIAG_NOISES)
        _choice("init", init, INITS)
        width = self.in_features if self.noise_space == "pre_logits" else self.num_classes
        self.noise_width = width
        has_factors = self.variant.has_factors
        self.num_factors = resolved_num_factors(covariance, num_factors, width, self.noise_space) if has_factors else 0
        check_sampling_options(train_mc_samples, eval_mc_samples, mc_chunk_size, clip_eps, eval_seed)
        self.train_mc_samples, self.eval_mc_samples = int(train_mc_samples), int(eval_mc_samples)
        self.share_samples_across_batch = bool(share_samples_across_batch)
        self.mc_chunk_size = None if mc_chunk_size is None else int(mc_chunk_size)
        self.eval_seed = eval_seed
        self.clip_eps = clip_eps
        self.pe_noise_bias = bool(pe_noise_bias)

        # temperature
        self.learn_temperature = bool(learn_temperature)
        self.temperature_bounds = checked_temperature_bounds(self.learn_temperature, temperature, temperature_bounds)
        check_unused_options(HeteroscedasticHead.__init__, options)  # once every value is in range
        if self.learn_temperature:  # τ = lo + (hi - lo)·sigmoid(t): t = logit of where τ starts (0: the midpoint)
            lo, hi = self.temperature_bounds
            start = 0.0 if temperature is None else math.log((temperature - lo) / (hi - temperature))
            self.temperature_logit = nn.Parameter(torch.tensor(start))
        else:
            register_fixed_temperature(self, temperature)

        # layers (names follow edward2: loc, diag, then the variant's own: scale, scale_het, scale_hom)
        self.loc = nn.Linear(self.in_features, self.num_classes)
        if self.noise_form is not None:
            self.diag = nn.Linear(self.in_features, width)
        for name, layer in self.variant.build(self).items():
            setattr(self, name, layer)
        init_parameters(self, init, cov_init_scale)

    def extra_repr(self) -> str:
        s = (
            f"in_features={self.in_features}, num_classes={self.num_classes}, covariance={self.covariance_type!r}, "
            f"link={self.link!r}"
        )
        if self.noise_form is not None:
            s += (
                f", num_factors={self.num_factors}, noise_space={self.noise_space!r}, "
                f"train_mc_samples={self.train_mc_samples}, eval_mc_samples={self.eval_mc_samples}"
            )
        return s

    @property
    def variant(self) -> CovarianceVariant:
        """The registry row of this head's ``covariance`` (:data:`~harness.heads.variants.VARIANTS`): its layers and
        the tensors it hands the sampler. Looked up, not stored, so that the head pickles."""
        return VARIANTS[self.covariance_type]

    @property
    def noise_definition(self) -> Optional[str]:
        """The noise of this head's outputs in ``eval()`` mode, as results record it (``metrics.json``'s
        ``eval_noise``): :data:`~harness.heads.noise.EVAL_NOISE` (``"counter/1"``) for a seeded evaluation
        (``eval_seed`` set), the same eager and compiled; ``"fresh"`` with ``eval_seed=None`` (torch's global
        RNG, a new draw each call: not reproducible from the result); None for ``covariance="none"`` (no noise)."""
        if self.noise_form is None:
            return None
        return EVAL_NOISE if self.eval_seed is not None else "fresh"

    # ------------------------------------------------------------------ parameters of the latent
    @property
    def temperature(self) -> Tensor:
        """τ as a 0-dim tensor (learned: lo + (hi - lo)·sigmoid(t); edward2 ``compute_temperature``)."""
        if self.learn_temperature:
            lo, hi = self.temperature_bounds
            return lo + (hi - lo) * torch.sigmoid(self.temperature_logit)
        return self.fixed_temperature

    def _features(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"expected input features of width D={self.in_features} in the last dim, got shape "
                f"{tuple(x.shape)}; build the head with in_features={x.shape[-1]} or fix the backbone output"
            )
        return x.reshape(-1, self.in_features).to(self.loc.weight.dtype)

    def mean_logits(self, x: Tensor) -> Tensor:
        """loc(x) ``[..., K]``: the deterministic logits (JAX ``return_locs``), untempered; the mean of
        u(x) too, except for ``parameter_efficient`` with ``pe_noise_bias``, whose noise adds the mean
        v(x) ⊙ b_V (see :meth:`latent_parameters`)."""
        with full_precision(x.device.type):
            return self.loc(self._features(x)).reshape(*x.shape[:-1], self.num_classes)

    def _noise_parameters(self, h: Tensor) -> "dict[str, Optional[Tensor]]":
        """Parameters of the noise for features ``h`` ``[N, D]``: mu [N,K], scale d [N,W],
        factors (V [N,W,R] or v [N,W]), hom_factors V [W,R], projection [K,W]."""
        mu, t = self.loc(h), self.variant.tensors(self, h)
        if t.mean_shift is not None:  # a shift of the noise's mean moves μ (through the class weights for HET-XL)
            mu = mu + (t.mean_shift @ self.loc.weight.t() if self.noise_space == "pre_logits" else t.mean_shift)
        return {
            "mu": mu,
            "scale": F.softplus(self.diag(h)) + MIN_SCALE,
            "factors": t.factors,
            "hom_factors": t.hom_factors,
            "projection": self.loc.weight if self.noise_space == "pre_logits" else None,
        }

    def latent_parameters(self, x: Tensor) -> "dict[str, Tensor]":
        """The parameters of u(x) for input ``[..., D]`` flattened to N rows (the reference's ``return_locs`` / scale outputs).

        Returns:
            ``mu`` [N, K] (loc(x), the untempered mean logits; for ``parameter_efficient`` with
            ``pe_noise_bias`` the noise has mean v(x) ⊙ b_V, so u(x) has mean mu + v(x) ⊙ b_V, projected by
            the class weights for HET-XL), ``tau`` (0-dim), and, with noise,
            ``d`` [N, W] (diagonal standard deviations); ``V`` [N, W, R] for ``low_rank``; ``v`` [N, W],
            ``V`` [W, R] (and ``b_V`` [W] if ``pe_noise_bias``) for ``parameter_efficient``.
            W = K for HET, D for HET-XL.
        """
        h = self._features(x)
        with full_precision(h.device.type):
            out = {"mu": self.loc(h), "tau": self.temperature}
            if self.noise_form is not None:
                out["d"] = F.softplus(self.diag(h)) + MIN_SCALE
                out.update(self.variant.tensors(self, h).latent)
        return out

    def factor_loadings(self, x: Tensor) -> Tensor:
        """V(x) ``[N, W, R]`` (PE: diag(v(x))·V) for input ``[..., D]`` flattened to N rows.

        W = K for HET, D for HET-XL. Raises ValueError for ``covariance`` none/diagonal.
        """
        if not self.variant.has_factors:
            raise ValueError(f"covariance={self.covariance_type!r} has no factors")
        with full_precision(x.device.type):
            p = self._noise_parameters(self._features(x))
        return noise_factors(self.noise_form, p["scale"], p["factors"], p["hom_factors"])[0]

    def diagonal_scale(self, x: Tensor) -> Tensor:
        """d(x) = softplus(diag(x)) + 1e-3, ``[N, W]``: standard deviations of the diagonal noise."""
        if self.noise_form is None:
            raise ValueError("covariance='none' has no noise")
        with full_precision(x.device.type):
            return F.softplus(self.diag(self._features(x))) + MIN_SCALE

    def covariance_factors(self, x: Tensor) -> "tuple[Tensor, Optional[Tensor]]":
        """The factors of the noise covariance in the noise space W (W = K for HET, D for HET-XL):
        Σ_W(x) = F Fᵀ + diag(d²), the one place the paper's Eq. 7 is assembled.

        Args:
            x: features ``[..., D]`` (flattened to N rows).

        Returns:
            ``(F [N, W, R'], d [N, W])``: R' = R for ``low_rank`` (V(x)) and ``parameter_efficient``
            (diag(v(x))·V), 0 for ``diagonal``; with ``diag_noise="shared_scalar"`` d joins F as one
            more column and None is returned in its place (the JAX reference's rank-1 "diagonal").

        Raises:
            ValueError: covariance='none'.
        """
        if self.noise_form is None:
            raise ValueError("covariance='none' has no noise covariance")
        h = self._features(x)
        with full_precision(h.device.type):
            return self._covariance_factors(h)

    def _covariance_factors(self, h: Tensor) -> "tuple[Tensor, Optional[Tensor]]":
        p = self._noise_parameters(h)
        return noise_factors(
            self.noise_form,
            p["scale"],
            p["factors"],
            p["hom_factors"],
            shared_scalar=self.diag_noise == "shared_scalar",
        )

    def covariance(
        self,
        x: Tensor,
        rows: Optional[Tensor] = None,
        cols: Optional[Tensor] = None,
        tempered: bool = False,
        max_elements: int = MAX_DENSE_COVARIANCE_ELEMENTS,
    ) -> Tensor:
        """Block ``Σ(x)[rows][:, cols]`` of the logit covariance, ``[N, len(rows), len(cols)]``.

        Σ(x) = V Vᵀ + diag(d²) (HET; paper Eq. 7), with diag(d²) replaced by d dᵀ for
        ``diag_noise="shared_scalar"``; HET-XL: L (V Vᵀ + diag(d²)) Lᵀ with L the ``[K, D]`` class
        weights (Collier et al., ICLR 2023, Sec. 3). Computed from the factors, so a block costs
        O(N·|rows|·|cols|·R) and the full K×K matrix is never formed unless asked for.

        Args:
            x: features ``[..., D]`` (flattened to N rows).
            rows, cols: class indices (LongTensor); None means all K classes.
            tempered: return Σ/τ², the covariance of the tempered logits.
            max_elements: refuse (ValueError) to build a block with more elements; raise it to
                build a large block on purpose.

        Raises:
            ValueError: covariance='none', or the block exceeds ``max_elements``.
        """
        if self.noise_form is None:
            raise ValueError("covariance='none' has no noise covariance")
        h = self._features(x)
        with full_precision(h.device.type):
            factors, d = self._covariance_factors(h)
            projection = self.loc.weight if self.noise_space == "pre_logits" else None
            cov = covariance_block(factors, d, self.num_classes, rows, cols, projection, max_elements)
            return cov / self.temperature.square() if tempered else cov

    # ------------------------------------------------------------------ sampling
    def _mc_samples(self, mc_samples: Optional[int], seed: Optional[int]) -> int:
        """S of a call (``mc_samples``, else the mode's count), once it and the call's ``seed`` pass the head's rules."""
        check_seed("seed", seed, "the head's eval_seed")
        check_live_options(self, HeteroscedasticHead.__init__)  # head.clip_eps = 2.0 since it was built
        s = (self.train_mc_samples if self.training else self.eval_mc_samples) if mc_samples is None else mc_samples
        return check_mc_samples("mc_samples", s)

    def sample_logits(self, x: Tensor, mc_samples: Optional[int] = None, seed: Optional[int] = None) -> Tensor:
        """Tempered logit samples z_s = (μ + P n_s)/τ, ``[..., S, K]``, materialised (for analysis).

        The samples are exactly those :meth:`forward` averages for the same S and seed (its
        chunks, concatenated). In a seeded evaluation they come from the shared evaluation noise
        bank, so a row's samples do not depend on the batch (see ``eval_seed``).

        Raises:
            ValueError: input width is not D; ``mc_samples`` not a whole number in [1, 1,000,000] or ``seed`` not one
                in [0, 2**32 - 1] (a bool or a fraction is refused, not truncated).
        """
        h = self._features(x)
        s = self._mc_samples(mc_samples, seed)
        with full_precision(h.device.type):
            if self.noise_form is None or h.is_meta:  # meta tensors: shapes only, no noise drawn
                z = (self.loc(h) / self.temperature).unsqueeze(1).expand(-1, s, -1)
            else:
                p = self._noise_parameters(h)
                noise, chunk, _, key = plan_noise(self, h, s, seed)
                if key is not None:  # counter noise: one draw of all S samples (chunking does not change it)
                    idx = torch.arange(s, device=h.device, dtype=torch.int64)
                    eps = noise.draw(key, idx, h.shape[0], h.dtype)
                else:
                    parts = [noise(start, min(chunk, s - start)) for start in range(0, s, chunk)]
                    eps = [None if parts[0][i] is None else torch.cat([q[i] for q in parts], dim=1) for i in (0, 1)]
                z = chunk_logits(self.noise_form, *eps, temperature=self.temperature, **p)
        return z.reshape(*x.shape[:-1], s, self.num_classes)

    def forward(self, x: Tensor, mc_samples: Optional[int] = None, seed: Optional[int] = None) -> Tensor:
        """Logits ``[..., K]`` of the MC-averaged probability.

        Softmax link: logits = log p̄ (so softmax(logits) = p̄ and cross-entropy = -log p̄_y).
        Sigmoid link: logits = log p̄ - log(1 - p̄) (so sigmoid(logits) = p̄ and BCE-with-logits is
        the Bernoulli NLL of p̄). ``covariance="none"``: μ(x)/τ, exactly a linear layer at τ = 1.
        Computed and returned in float32 whatever the surrounding precision, except that under ``torch.autocast``
        a HET-XL head (``noise_space="pre_logits"``) runs its projection products in the autocast dtype
        (:attr:`~harness.heads.chunk.NoiseLayout.product_dtype`; the bound on the difference is in
        docs/guide/head.md, "Mixed precision", and tested).

        In ``eval()`` mode with a seed (``seed`` or ``eval_seed``, the default) all rows share one
        noise bank chunked independently of the batch size, so a row's output depends only on its
        features (up to float rounding of the dense layers); its estimate is unbiased with the same
        variance, but rows' MC errors are correlated (see ``eval_seed``). In training, or with no
        seed, the noise is fresh and independent per row (unless ``share_samples_across_batch``).

        Args:
            x: ``[..., D]`` features.
            mc_samples: override S for this call (default: train/eval setting by ``self.training``).
            seed: override the noise seed for this call (in ``eval()`` mode: the bank's seed).

        Raises:
            ValueError: input width is not D; ``mc_samples`` not a whole number in [1, 1,000,000] or ``seed`` not one
                in [0, 2**32 - 1] (a bool or a fraction is refused, not truncated), whatever the covariance.

        Source: paper Eq. 4-6; the average of edward2 ``edward2/tensorflow/layers/heteroscedastic.py`` taken in log space; fixed evaluation
        noise as in uncertainty-baselines' JAX evaluation (``baselines/jft/heteroscedastic.py``), shared across rows
        as ``share_samples_across_batch``.
        """
        lead = x.shape[:-1]
        h = self._features(x)
        s = self._mc_samples(mc_samples, seed)
        low = autocast_dtype(h.device.type) if self.noise_space == "pre_logits" else None
        with full_precision(h.device.type):
            if self.noise_form is None or h.is_meta:  # meta tensors: shapes only, no noise drawn
                logits, tau = self.loc(h), self.fixed_temperature if not self.learn_temperature else None
                if tau is None or torch.compiler.is_compiling() or tau.is_meta or float(tau) != 1.0:
                    logits = logits / self.temperature
                return logits.reshape(*lead, self.num_classes)
            noise, chunk, row_block, key = plan_noise(self, h, s, seed)
            layout = NoiseLayout(self.noise_form, self.link, s, chunk, low)
            p = self._noise_parameters(h)
            n = h.shape[0]
            if row_block is None or row_block >= n:
                out = monte_carlo_log_average(layout, noise, temperature=self.temperature, key=key, **p)
            else:  # bank noise is shared, so row blocks need no slicing of the noise
                blocks = [
                    monte_carlo_log_average(
                        layout,
                        noise,
                        temperature=self.temperature,
                        **{
                            k: v[i : i + row_block] if k in ("mu", "scale", "factors") and v is not None else v
                            for k, v in p.items()
                        },
                    )
                    for i in range(0, n, row_block)
                ]
                out = torch.cat(blocks) if self.link == "softmax" else tuple(torch.cat(part) for part in zip(*blocks))
            logits = log_average_to_logits(out, self.link, self.clip_eps)
        return logits.reshape(*lead, self.num_classes)


check_option_types(HeteroscedasticHead.__init__, {})  # resolves their kinds once, eagerly: compiled calls read them
