r"""The offline CXR8 stand-in: small generated grey images with multi-hot findings, by patient.

No file is read. Each image is a patient's smooth "anatomy" plus noise plus, for every finding it
has, that finding's fixed blob; each patient has several images and a propensity per finding:

* patients: ``n_patients``, each with :math:`1 + \mathrm{Poisson}(m - 1)` images, m = 3.64 the
  mean of CXR8 (112,120 images of 30,805 patients, Licudi et al. 2025, App. B.3);
* findings: K (default 8, the paper's count); finding k has prevalence :math:`\pi_k`, from 0.2
  down to 0.02 geometrically (imbalanced, riemfl's choice), and a patient p has it in each image
  with probability :math:`\sigma(\mathrm{logit}\,\pi_k + b_{pk})`, :math:`b_{pk} \sim N(0, 1)`
  (findings recur in a patient's images, and clients of whole patients differ in label mix);
* pixels (side ``size``): :math:`x = 0.5 + a_p(u, v) + s \sum_k y_k g_k(u, v) + \epsilon`,
  clipped to [0, 1], with :math:`a_p` a random combination of three low-frequency cosines
  (amplitude 0.1), :math:`g_k` a Gaussian blob of width 0.1 centred on a ring of radius 0.3
  around the image centre at angle :math:`2\pi k / K`, signal ``s`` (default 0.15) and
  :math:`\epsilon \sim N(0, \mathrm{noise}^2)` per pixel (default 0.15). With these defaults a
  logistic regression per finding on the pooled training pixels reaches a test macro AUROC of
  about 0.85 (seeds 0 and 1): T_e's target 1 - AUROC <= 0.25 is within reach, not trivial.

What it shows: the per-patient partition (:func:`~riemfl.experiments.licudi2025.cxr8.
patient_clients`), multi-label training with binary cross-entropy and the macro AUROC, macro
AUPRC and T_e of Table 2 (:mod:`~riemfl.experiments.licudi2025.multilabel`) on an imbalanced
task with patient-level heterogeneity, at the cost of seconds. What it cannot show: anything
about chest X-rays (the findings are separable blobs, not pathology), the difficulty of the real
task (the paper's macro AUROC is about 0.78), or ShuffleNet V2 at 128 x 128 (the images are
16 x 16 by default, for :class:`riemfl.nn.SmallCNN` with ``image_size=16, n_classes=8``); its
numbers are not comparable with Table 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import integer, real
from ...problems.checks import data_rng
from .cxr8 import PAPER_CLIENTS, patient_clients

__all__ = ["IMAGES_PER_PATIENT", "cxr8_standin", "cxr8_standin_clients"]

#: mean images per patient of CXR8 (Licudi et al. 2025, App. B.3: 112,120 images, 30,805 patients)
IMAGES_PER_PATIENT = 112_120 / 30_805


def cxr8_standin(
    n_patients: int = 300,
    *,
    n_conditions: int = 8,
    size: int = 16,
    signal: float = 0.15,
    noise: float = 0.15,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generated multi-label images of ``n_patients`` patients (module docstring).

    Parameters
    ----------
    n_patients : int, default 300
        About 3.64 images each (about 1,100 images).
    n_conditions : int, default 8
        K, the findings.
    size : int, default 16
        Image side (>= 4).
    signal, noise : float
        A finding's blob height and the pixel noise's standard deviation.
    seed : int, default 0
        Seed (``data_rng(seed, "cxr8-standin")``).

    Returns
    -------
    x : numpy.ndarray of float32, shape (n, 1, size, size)
        Values in [0, 1].
    y : numpy.ndarray of float32, shape (n, K)
        Multi-hot findings.
    patients : numpy.ndarray of int64, shape (n,)
        The patient of each image, 0..n_patients-1.
    """
    n_patients = integer(n_patients, "cxr8_standin: n_patients", minimum=1)
    k = integer(n_conditions, "cxr8_standin: n_conditions", minimum=1)
    size = integer(size, "cxr8_standin: size", minimum=4)
    signal = real(signal, "cxr8_standin: signal", at_least=0)
    noise = real(noise, "cxr8_standin: noise", at_least=0)
    rng = data_rng(seed, "cxr8-standin")
    counts = 1 + rng.poisson(IMAGES_PER_PATIENT - 1, n_patients)
    patients = np.repeat(np.arange(n_patients, dtype=np.int64), counts)
    n = patients.size
    prevalence = np.geomspace(0.2, 0.02, k)
    propensity = np.log(prevalence / (1 - prevalence)) + rng.normal(size=(n_patients, k))
    y = (rng.random((n, k)) < 1 / (1 + np.exp(-propensity[patients]))).astype(np.float32)
    v, u = np.mgrid[0:size, 0:size] / (size - 1)
    angle = 2 * np.pi * np.arange(k) / k
    cu, cv = 0.5 + 0.3 * np.cos(angle), 0.5 + 0.3 * np.sin(angle)
    blobs = np.exp(-((u - cu[:, None, None]) ** 2 + (v - cv[:, None, None]) ** 2) / (2 * 0.1**2))
    waves = np.stack([np.cos(np.pi * u), np.cos(np.pi * v), np.cos(np.pi * (u + v))])
    anatomy = np.einsum("pj,jhw->phw", rng.normal(scale=0.1, size=(n_patients, 3)), waves)
    x = 0.5 + anatomy[patients] + signal * np.einsum("nk,khw->nhw", y, blobs)
    x += rng.normal(scale=noise, size=x.shape)
    return np.clip(x, 0.0, 1.0).astype(np.float32)[:, None], y, patients


def cxr8_standin_clients(
    n_clients: int = PAPER_CLIENTS,
    *,
    n_patients: int = 300,
    test_fraction: float = 0.2,
    seed: int = 0,
    **standin: Any,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The stand-in's clients (X_train, y_train, X_test, y_test), dealt by patient.

    :func:`cxr8_standin` (its other keyword arguments: ``n_conditions``, ``size``, ``signal``,
    ``noise``), then :func:`~riemfl.experiments.licudi2025.cxr8.patient_clients`: the code path of
    the NIH files. For :class:`riemfl.nn.TorchClientTrainer` with ``loss="bce_multilabel"``.
    """
    x, y, patients = cxr8_standin(n_patients, seed=seed, **standin)
    parts = patient_clients(patients, n_clients, test_fraction=test_fraction, seed=seed)
    return [(x[train], y[train], x[test], y[test]) for train, test in parts]
