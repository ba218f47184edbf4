"""Adapters between riemfl and other libraries (geoopt, pymanopt, Flower).

Installed as ``riemfl.adapters``. Each adapter imports its library lazily and holds no
mathematics of its own: it only translates between riemfl's manifold contract and the other
library's API.

* :mod:`riemfl.adapters.geoopt`: ``to_geoopt``, ``from_geoopt`` (``pip install "riemfl[geoopt]"``);
  :mod:`riemfl.adapters.geoopt_api` holds the geoopt class APIs of ``to_geoopt``'s stand-ins;
* :mod:`riemfl.adapters.pymanopt`: ``to_pymanopt``, ``from_pymanopt``, ``solve``
  (``pip install "riemfl[pymanopt]"``);
* :mod:`riemfl.adapters.flower`: Flower ``ServerApp``/``ClientApp`` for riemfl's algorithms
  (``pip install "riemfl[flower]"``).

See ``docs/adapters.md`` and ``docs/flower.md``.
"""
