"""The conformance kit on every manifold riemfl ships (numpy/torch, float64/float32)."""

from riemfl import Euclidean, Grassmann, Lorentz, Product, Sphere, Stiefel
from riemfl.testing import ManifoldTests


class TestEuclidean(ManifoldTests):
    manifold = Euclidean(4, 2)


class TestSphere(ManifoldTests):
    manifold = Sphere(5)


class TestStiefelPolar(ManifoldTests):
    manifold = Stiefel(6, 3)


class TestStiefelQR(ManifoldTests):
    manifold = Stiefel(5, 2, retraction="qr")


class TestStiefelColumn(ManifoldTests):
    manifold = Stiefel(4, 1)


class TestGrassmann(ManifoldTests):
    manifold = Grassmann(6, 2)


class TestLorentz(ManifoldTests):
    manifold = Lorentz(3)


class TestLorentzCurved(ManifoldTests):
    manifold = Lorentz(2, beta=2.5)


class TestProduct(ManifoldTests):
    manifold = Product(Sphere(3), Stiefel(4, 2), Lorentz(2))
