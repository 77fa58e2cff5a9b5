"""Attention-stage attribution over the linked tables: labels, ``nn.Module`` scopes (``scopes``), op rules,
eager op order (``eager``), kernel order (``kernel_blocks``) and backward ops (``backward``); ``assign``
runs them and writes the decisions and the calls.

See docs/architecture.md for the layers and who owns what.
"""
