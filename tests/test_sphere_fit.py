"""The sphere fit on known solids: a box and a capsule come out covered, with little sticking out.

Bodies are meshed from analytic occupancy (as a learned link is), fitted with the export's greedy
cover and joint refinement, and judged against the exact solids: surface coverage of exact surface
samples and how far the union's outer surface lies outside (the analytic signed distance).
"""

from __future__ import annotations

import numpy as np
import pytest

BOX = np.array([0.15, 0.04, 0.03])  # half extents, m
CAPSULE = (0.04, 0.12)  # radius, half length of the axis segment (along z), m


def box_distance(points: np.ndarray) -> np.ndarray:
    q = np.abs(points) - BOX
    return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)


def capsule_distance(points: np.ndarray) -> np.ndarray:
    radius, half = CAPSULE
    axis = np.clip(points[:, 2], -half, half)
    return np.linalg.norm(points - np.stack([np.zeros_like(axis), np.zeros_like(axis), axis], axis=1), axis=1) - radius


def exact_surface(distance, lo, hi, rng, count=20_000):
    """Points within 0.1 mm of the exact surface, by rejection then one projection step."""
    points = rng.uniform(lo, hi, (count * 40, 3))
    d = distance(points)
    near = points[np.abs(d) < 0.004][:count]
    step = 1e-5
    for _ in range(3):  # Newton steps along the numerical gradient onto the zero set
        grad = np.stack([(distance(near + step * e) - distance(near - step * e)) / (2 * step) for e in np.eye(3)], axis=1)
        near = near - distance(near)[:, None] * grad / np.maximum(np.linalg.norm(grad, axis=1, keepdims=True) ** 2, 1e-12)
    return near


@pytest.fixture(scope="module")
def fitted():
    from selfmodel.export.bodies import link_body
    from selfmodel.export.exporter import sphere_target
    from selfmodel.export.sphere_fit import refine_covers
    from selfmodel.export.spheres import fit_sphere_covers

    rng = np.random.default_rng(0)
    shapes = {"box": (box_distance, -BOX - 0.02, BOX + 0.02),
              "capsule": (capsule_distance, -np.array([0.06, 0.06, 0.18]), np.array([0.06, 0.06, 0.18]))}
    targets = []
    for name, (distance, lo, hi) in shapes.items():
        body = link_body(name, lambda p, d=distance: 1.0 / (1.0 + np.exp(np.clip(d(p) / 0.001, -50, 50))), lo, hi, 0.004)
        targets.append(sphere_target(name, body, 0.0, rng))
    greedy = fit_sphere_covers(targets, 16, rng=rng)
    refined, info = refine_covers(targets, greedy, iterations=250)
    return shapes, greedy, refined, info


def figures(cover, distance, lo, hi):
    rng = np.random.default_rng(3)
    surface = exact_surface(distance, lo, hi, rng)
    shell = cover.surface_points(400, rng)
    outside = np.maximum(distance(shell), 0.0)
    return float(np.mean(cover.outside_distance(surface) <= 1e-9)), float(np.percentile(outside, 95))


def test_refined_spheres_cover_a_box_and_a_capsule_and_stay_close(fitted):
    shapes, _, refined, info = fitted
    assert sum(len(cover.radii) for cover in refined.values()) <= 16
    # Measured: capsule 100 % covered, p95 5.0 mm; box 99.6 %, p95 26.7 mm (a 60 x 80 mm section
    # takes spheres of about its half diagonal, 50 mm, so they stand some 20 mm off its faces).
    bounds = {"capsule": (0.998, 0.007), "box": (0.99, 0.035)}
    for name, (distance, lo, hi) in shapes.items():
        coverage, p95 = figures(refined[name], distance, lo, hi)
        assert coverage > bounds[name][0], (name, coverage)
        assert p95 < bounds[name][1], (name, p95)
        assert info["uncovered"][name] == 0.0  # no neighbour to keep clear of: every target point held


def test_refinement_sticks_out_less_than_the_greedy_cover(fitted):
    shapes, greedy, refined, _ = fitted
    # Measured 5.0 mm refined against 6.9 mm greedy on the capsule.
    assert figures(refined["capsule"], *shapes["capsule"])[1] < 0.9 * figures(greedy["capsule"], *shapes["capsule"])[1]


def test_holding_the_surface_comes_before_bulging_less():
    from selfmodel.export.spheres import UNCOVERED_TIE, best_of

    # (uncovered share, union volume m^3): the smallest union wins only among covers that hold as much.
    assert best_of([(0.02, 1.0), (0.001, 2.0), (0.001 + 0.5 * UNCOVERED_TIE, 1.5)]) == 2
    assert best_of([(0.02, 1.0), (0.001, 2.0), (0.001 + 2.0 * UNCOVERED_TIE, 1.5)]) == 1
    assert best_of([(0.0, 3.0), (0.0, 2.0)]) == 1


def test_a_link_bounded_by_its_neighbour_keeps_the_start_that_holds_its_surface():
    """A neighbour the arm stood next to (a slab 20 mm over the box's top and beside one side) bounds
    the spheres: every greedy start is refined, and the one kept holds the most of the surface, not
    the one that bulges least. Unbounded, one start is refined."""
    from scipy.spatial import cKDTree

    from selfmodel.export.bodies import link_body
    from selfmodel.export.exporter import sphere_target
    from selfmodel.export.sphere_groups import fit_groups
    from selfmodel.export.spheres import UNCOVERED_TIE

    body = link_body("box", lambda p: 1.0 / (1.0 + np.exp(np.clip(box_distance(p) / 0.001, -50, 50))),
                     -BOX - 0.02, BOX + 0.02, 0.004)
    target = sphere_target("box", body, 0.0, np.random.default_rng(0))
    grid = np.stack(np.meshgrid(np.linspace(-0.2, 0.2, 101), np.linspace(-0.08, 0.08, 41), indexing="ij"),
                    -1).reshape(-1, 2)
    target.obstacles = np.vstack([np.column_stack([grid, np.full(len(grid), BOX[2] + 0.02)]),
                                  np.column_stack([grid[:, 0], np.full(len(grid), BOX[1] + 0.02), 0.5 * grid[:, 1]])])
    target.limit = np.maximum(cKDTree(target.obstacles).query(target.centres)[0] - body.voxel, 1e-4)
    _, report = fit_groups([target], 8, iterations=60, seed=0, polish=0)  # the starts as compared, unpolished
    starts = {start["bulge_mm"]: start["uncovered"] for start in report["starts"]}
    assert sorted(starts) == [4.0, 8.0, 12.0, 18.0, 25.0]
    assert all(start["refined"] for start in report["starts"])
    kept = starts[report["bulge_mm"]]
    assert kept == pytest.approx(report["uncovered"]["box"], abs=1e-5)
    assert kept <= min(starts.values()) + UNCOVERED_TIE
    # Measured: refined, the 4 mm start leaves 5.5 % out, the 25 mm start kept 4.6 %.
    assert starts[4.0] > kept + 2 * UNCOVERED_TIE, starts
    # Of the starts that hold as much, the kept one stands out least.
    out = {start["bulge_mm"]: start["stands_out_p95_mm"] for start in report["starts"]}
    tied = [bulge for bulge, share in starts.items() if share <= min(starts.values()) + UNCOVERED_TIE]
    assert out[report["bulge_mm"]] == min(out[bulge] for bulge in tied), (out, tied)
    target.limit = target.obstacles = None
    _, unbounded = fit_groups([target], 8, iterations=60, seed=0, polish=0)
    assert [start["refined"] for start in unbounded["starts"]].count(True) == 1


def ball_target():
    """The sphere fit's target of a ball of 30 mm radius about the origin (2 mm cells, no margin)."""
    from selfmodel.export.bodies import link_body
    from selfmodel.export.exporter import sphere_target

    body = link_body("ball", lambda p: 1.0 / (1.0 + np.exp(np.clip((np.linalg.norm(p, axis=1) - 0.03) / 0.001, -50, 50))),
                     -np.full(3, 0.05), np.full(3, 0.05), 0.002)
    return sphere_target("ball", body, 0.0, np.random.default_rng(0))


def test_how_far_spheres_stand_out_is_read_over_every_spheres_surface():
    """stand_out: a ball of 40 mm around a body that is a ball of 30 mm stands out 10 mm everywhere;
    a second, smaller sphere inside the first changes nothing the first's surface says, and one
    reaching 25 mm beyond the body sets the 95th percentile when it is most of the area."""
    from selfmodel.export.sphere_groups import stand_out
    from selfmodel.export.spheres import SphereCover

    target = ball_target()
    rng = np.random.default_rng(1)
    one = SphereCover(np.zeros((1, 3)), np.array([0.04]))
    assert stand_out([target], {"ball": one}, rng) == pytest.approx(0.010, abs=0.0015)
    inner = SphereCover(np.array([[0.0, 0.0, 0.0], [0.005, 0.0, 0.0]]), np.array([0.04, 0.02]))
    assert stand_out([target], {"ball": inner}, rng) == pytest.approx(0.010, abs=0.0015)
    far = SphereCover(np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), np.array([0.04, 0.055]))
    assert stand_out([target], {"ball": far}, rng) == pytest.approx(0.025, abs=0.0015)


def test_what_is_held_comes_first_then_how_far_it_stands_out_then_the_union():
    from selfmodel.export.sphere_groups import STAND_OUT_TIE, least_standing_out
    from selfmodel.export.spheres import UNCOVERED_TIE

    # (uncovered share, stands out m, union m^3)
    scores = {0: (0.5 * UNCOVERED_TIE, 0.021, 100.0), 1: (0.5 * UNCOVERED_TIE, 0.021 + 0.5 * STAND_OUT_TIE, 90.0),
              2: (0.0, 0.030, 50.0), 3: (3 * UNCOVERED_TIE, 0.001, 10.0)}
    assert least_standing_out(scores) == 1  # 3 leaves more out; 2 stands out; 0 and 1 tie, 1 the smaller union
    scores[1] = (0.5 * UNCOVERED_TIE, 0.021 + 2 * STAND_OUT_TIE, 90.0)
    assert least_standing_out(scores) == 0


def test_of_starts_that_hold_as_much_the_one_standing_out_least_is_kept(monkeypatch):
    """Two refined starts hold the whole ball: one sphere of 45 mm (15 mm beyond, the larger union)
    and one of 35 mm with a small sphere reaching 32 mm beyond (the smaller union). The first is kept."""
    from selfmodel.export import sphere_groups
    from selfmodel.export.spheres import Candidate, SphereCover

    target = ball_target()
    target.limit = np.full(len(target.centres), 1.0)  # bounded: every start is refined
    round_one = {"ball": SphereCover(np.zeros((1, 3)), np.array([0.045]))}
    with_spike = {"ball": SphereCover(np.array([[0.0, 0.0, 0.0], [0.05, 0.0, 0.0]]), np.array([0.035, 0.012]))}
    assert with_spike["ball"].union_volume() < 0.6 * round_one["ball"].union_volume()
    monkeypatch.setattr(sphere_groups, "sphere_candidates", lambda targets, budget: [
        Candidate(0.012, with_spike, 0.0), Candidate(0.018, round_one, 0.0)])
    monkeypatch.setattr(sphere_groups, "refine_starts", lambda targets, starts, contacts, **_: [
        (covers, {"uncovered": {"ball": 0.0}}) for covers in starts])
    covers, report = sphere_groups.fit_groups([target], 4)
    assert report["bulge_mm"] == 18.0 and covers is round_one, report
    out = {start["bulge_mm"]: start["stands_out_p95_mm"] for start in report["starts"]}
    assert out[18.0] == pytest.approx(15.0, abs=1.5) and out[12.0] > 20.0, out


def test_the_kept_start_is_polished_and_the_polish_taken_only_where_it_is_no_worse(monkeypatch):
    """A bounded fit refines the start it keeps again, alone: a polish that holds the whole ball where
    the kept start left a sphere's worth out is taken; one that holds as much but stands out 20 mm
    further is not, and the report says which. Unbounded, nothing is polished by default."""
    from selfmodel.export import sphere_groups
    from selfmodel.export.spheres import Candidate, SphereCover

    target = ball_target()
    target.limit = np.full(len(target.centres), 1.0)  # bounded
    short = {"ball": SphereCover(np.zeros((1, 3)), np.array([0.028]))}
    whole = {"ball": SphereCover(np.zeros((1, 3)), np.array([0.032]))}
    bulging = {"ball": SphereCover(np.zeros((1, 3)), np.array([0.052]))}
    calls = []

    def refine(targets, starts, contacts, iterations, **_):
        calls.append(iterations)
        if len(calls) == 1:  # the starts, as the greedy left them
            return [(covers, {"uncovered": {"ball": 0.05 if covers is short else 0.0}}) for covers in starts]
        return [(polished, {"uncovered": {"ball": 0.0}})]

    monkeypatch.setattr(sphere_groups, "sphere_candidates", lambda targets, budget: [Candidate(0.004, short, 0.0)])
    monkeypatch.setattr(sphere_groups, "refine_starts", refine)
    polished = whole
    covers, report = sphere_groups.fit_groups([target], 4, iterations=7)
    assert calls == [7, sphere_groups.POLISH] and covers is whole
    assert report["polish"]["taken"] and report["polish"]["before_uncovered"] == 0.05, report["polish"]
    assert report["uncovered"] == {"ball": 0.0}

    calls.clear()
    monkeypatch.setattr(sphere_groups, "sphere_candidates", lambda targets, budget: [Candidate(0.004, whole, 0.0)])
    polished = bulging
    covers, report = sphere_groups.fit_groups([target], 4, iterations=7, polish=30)
    assert calls == [7, 30] and covers is whole and not report["polish"]["taken"]
    assert report["polish"]["after_stands_out_p95_mm"] == pytest.approx(22.0, abs=1.5), report["polish"]

    calls.clear()
    target.limit = None
    covers, report = sphere_groups.fit_groups([target], 4, iterations=7)
    assert calls == [7] and report["polish"] is None


def test_starts_refined_together_come_out_as_each_alone():
    """fit_groups refines its greedy starts in one batch: each start's spheres end where a
    refinement of that start alone puts them."""
    from selfmodel.export.bodies import link_body
    from selfmodel.export.exporter import sphere_target
    from selfmodel.export.sphere_fit import refine_covers, refine_starts
    from selfmodel.export.spheres import sphere_candidates

    body = link_body("capsule", lambda p: 1.0 / (1.0 + np.exp(np.clip(capsule_distance(p) / 0.001, -50, 50))),
                     -np.array([0.06, 0.06, 0.18]), np.array([0.06, 0.06, 0.18]), 0.004)
    targets = [sphere_target("capsule", body, 0.0, np.random.default_rng(0))]
    starts = [candidate.covers for candidate in sphere_candidates(targets, 6, bulges=(0.004, 0.018))]
    together = refine_starts(targets, starts, iterations=40)
    for start, (covers, _) in zip(starts, together):
        alone, _ = refine_covers(targets, start, iterations=40)
        np.testing.assert_allclose(covers["capsule"].centres, alone["capsule"].centres, atol=1e-9)
        np.testing.assert_allclose(covers["capsule"].radii, alone["capsule"].radii, atol=1e-9)


def test_the_union_holds_a_point_exactly_when_a_sphere_is_within_reach():
    from selfmodel.export.spheres import SphereCover

    rng = np.random.default_rng(2)
    cover = SphereCover(rng.uniform(-0.2, 0.2, (12, 3)) + [0.3, -0.4, 0.5], rng.uniform(0.01, 0.06, 12))
    points = rng.uniform(-0.3, 0.3, (50_000, 3)) + [0.3, -0.4, 0.5]
    # contains reads squared distances from a matrix product; outside_distance takes each difference
    assert np.array_equal(cover.contains(points), cover.outside_distance(points) <= 1e-9)


def test_one_count_a_pair_holds_every_bulges_answer():
    """held_levels' count for a surface point and a candidate exceeds len(bulges) - 1 - b exactly where
    the point lies within the candidate's radius at bulge b, a radius bound (limit) or not, and its
    hold counts are those answers' column sums."""
    from selfmodel.export.spheres import BULGES, SphereTarget, held_levels

    rng = np.random.default_rng(4)
    surface = rng.uniform(-0.1, 0.1, (2500, 3))  # more rows than one block
    centres = rng.uniform(-0.05, 0.05, (300, 3))
    target = SphereTarget("link", surface, 1e-5, centres, rng.uniform(0.0, 0.04, 300))
    for limit in (None, rng.uniform(0.01, 0.05, 300)):
        target.limit = limit
        levels, held = held_levels(target, BULGES, rows=1024)
        distances = np.linalg.norm(surface[:, None] - centres[None], axis=2).astype(np.float32)
        for b, bulge in enumerate(BULGES):
            within = distances <= target.radii(bulge).astype(np.float32)[None]
            near_edge = np.abs(distances - target.radii(bulge)[None]) < 1e-6  # float32 rounding may go either way
            assert np.array_equal((levels > len(BULGES) - 1 - b)[~near_edge], within[~near_edge])
            assert np.abs(held[b] - within.sum(axis=0)).max() <= near_edge.sum(axis=0).max()
