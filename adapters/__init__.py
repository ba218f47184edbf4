"""Adapters between riemfl and other libraries (geoopt, pymanopt, Flower).

Installed as ``riemfl.adapters``. Each adapter imports its library lazily and holds no
mathematics of its own: it only translates between riemfl's manifold contract and the other
library's API. The adapters themselves arrive with a later issue.
"""
