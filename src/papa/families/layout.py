"""A patched layer's head layout: its heads laid out [dynamic | replaced] (papa/families/base.py's module docstring),
and the way back to the stock order. A mixin of `PapaAttention`."""

import torch

from .pruning import head_rows, input_dim


class HeadLayout:
    """`papa_reorder_heads` lays a layer's heads out once; `papa_stock_order` reads per-head tensors back in the
    stock order. Needs the layer's `static_heads`, `dynamic_heads`, `mix_all_heads` and `papa_value_rows()`."""

    papa_head_order = None  # the stock heads in this layer's layout order; None: the stock order
    papa_layout_pending = False  # patched without reordering (a legacy folder being loaded)

    def papa_reorder_heads(self, output_projection):
        """Lay the heads out as [dynamic | replaced] (see the module docstring), in place.

        Permutes the value rows (`papa_value_rows`) and `output_projection`'s input columns (a Linear's
        weight columns, a GPT-2 Conv1D's weight rows) by
        `papa_head_order`; a layer whose heads are in that order already (none, all or only its last
        heads replaced, or mix mode) is left as it is. The result computes exactly what the stock
        layout computes.
        """
        order = self.dynamic_heads + self.static_heads if not self.mix_all_heads else []
        self.papa_head_order = None if order == sorted(order) else order
        self._papa_inverse = None  # papa_stock_order's cache belongs to the order
        self.papa_layout_pending = False
        if self.papa_head_order is None:
            return
        H = len(order)
        columns_dim = input_dim(output_projection)
        d = output_projection.weight.shape[columns_dim] // H
        with torch.no_grad():
            for owner, name, offset, *dim in self.papa_value_rows():
                param, dim = getattr(owner, name), (dim[0] if dim else 0)
                if param is None:
                    continue
                rows = torch.arange(param.shape[dim])
                rows[offset : offset + H * d] = offset + head_rows(order, d)
                param.copy_(param.index_select(dim, rows.to(param.device)))
            columns = head_rows(order, d).to(output_projection.weight.device)
            output_projection.weight.copy_(output_projection.weight.index_select(columns_dim, columns))

    def papa_stock_order(self, per_head, dim):
        """`per_head` (heads along `dim`, in this layer's layout) in the stock head order."""
        if self.papa_head_order is None:
            return per_head
        inverse = getattr(self, "_papa_inverse", None)
        if inverse is None or inverse.device != per_head.device:
            inverse = torch.argsort(torch.tensor(self.papa_head_order, device=per_head.device))
            self._papa_inverse = inverse
        return per_head.index_select(dim, inverse)
