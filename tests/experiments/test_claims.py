from riemfl.experiments.claims import Claim


def test_line_names_the_verdict_ours_and_the_papers():
    c = Claim("dcasgd-never-optimal", False, "optimal at 3 of 40 steps", "never optimal")
    assert c.line() == (
        "FAIL dcasgd-never-optimal: optimal at 3 of 40 steps (paper: never optimal)"
    )
    assert Claim("x", True, "a", "b").line().startswith("PASS x: a")
