"""trellis.torch's converted values, which the converter, the ATen table
and the patterns all take: a tensor with the permutation it is read
through, a constant computed in PyTorch, and the helpers on dimensions and
causal masks they share."""

from typing import Any, Optional, Tuple

import torch


class _Tensor:
    """A converted value: `value` permuted by `perm` (logical dimension i is
    the value's dimension perm[i]), so transposes cost nothing until a
    layout is needed."""

    __slots__ = ("value", "perm")

    def __init__(self, value: Any, perm: Optional[Tuple[int, ...]] = None):
        self.value = value
        self.perm = perm if perm is not None else tuple(range(len(value.shape)))

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.value.shape[p] for p in self.perm)


class _Constant:
    """A value that depends on no parameter and no input: computed here."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any):
        self.tensor = tensor


def _normalize_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _causal_window(mask: Any, rows: int, cols: int) -> Optional[int]:
    """The causal mask a constant mask is, in every batch: 0 for causal
    attention, W > 0 for a sliding window of W positions (each query sees
    its own and the W - 1 before; Mistral, Gemma 2), None for any other
    mask. Additive masks are 0 where they attend and at most -1e30
    elsewhere; boolean ones (scaled_dot_product_attention's) True where
    they attend. The queries are the last `rows` of the `cols` keys."""
    if mask.dim() < 2 or mask.shape[-2:] != (rows, cols):
        return None
    if mask.dtype == torch.bool:
        attends = mask.reshape(-1, rows, cols)
    else:
        flat = mask.reshape(-1, rows, cols).to(torch.float64)
        attends = flat == 0
        if not bool((attends | (flat <= -1e30)).all()):
            return None
    window = int(attends.sum(dim=-1).max())
    causal = torch.ones(rows, cols, dtype=torch.bool).tril(cols - rows)
    band = causal & ~torch.ones(rows, cols, dtype=torch.bool).tril(
        cols - rows - window)
    if window < 1 or not bool((attends == band).all()):
        return None
    return 0 if bool((band == causal).all()) else window
