# Owner(s): ["module: autograd"]
"""The threading cost's statistics (python/autograd_device_logging/
cost_statistics.py): every interval holds the level it states, shown by
simulation (Note [Intervals from order statistics]), and a negative control
with no true difference covers 0 as often as it claims."""

import ast
import importlib.util
import math
import os
from fractions import Fraction

import numpy as np
from torch.testing._internal.common_utils import TestCase, run_tests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cost_statistics():
    """The module, loaded from its file: it imports nothing of the package,
    and importing the package would load the library into this process."""
    path = os.path.join(REPO, "python", "autograd_device_logging", "cost_statistics.py")
    spec = importlib.util.spec_from_file_location("adl_cost_statistics", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stats = cost_statistics()


def benchmark_constants():
    """The comparison's size and margin as benchmarks/threading_cost_sections.py sets
    them, read from its source (importing it would build the library)."""
    path = os.path.join(REPO, "benchmarks", "threading_cost_sections.py")
    with open(path) as f:
        tree = ast.parse(f.read())
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("COMPARISON_PROCESSES", "MARGIN")
    }


BENCHMARK = benchmark_constants()
# The method comparison (Note [Comparing two methods]): processes per model,
# margin in points, and the largest spread of the processes' differences at
# which it must find a 20-point gap and pass no gap.
PROCESSES = 16
MARGIN = 10.0
SPREAD = 5.0

# Simulated jobs per number of units: more where the level is far from 0 or 1,
# so that 2 points stay 4 standard errors or more.
JOBS = 2000
JOBS_FEW_UNITS = 10000
FEW_UNITS = 5
TOLERANCE = 0.02


def jobs_for(n):
    return JOBS_FEW_UNITS if n <= FEW_UNITS else JOBS


class TestCostStatistics(TestCase):
    def test_each_stated_level_is_the_exact_binomial_coverage(self):
        for n in range(2, 201):
            k, level = stats.order_statistic_interval(n)

            def exact(k):
                return 1 - 2 * Fraction(sum(math.comb(n, i) for i in range(k)), 2**n)

            self.assertAlmostEqual(level, float(exact(k)), places=12, msg=n)
            if n >= 6:
                # The narrowest interval that still reaches 95%.
                self.assertGreaterEqual(exact(k), Fraction(95, 100), n)
                if k + 1 <= n // 2:
                    self.assertLess(exact(k + 1), Fraction(95, 100), n)
            else:
                self.assertEqual(k, 1, n)  # the range, below 95%
                self.assertLess(level, 0.95, n)
        self.assertIsNone(stats.order_statistic_interval(1))
        self.assertIsNone(stats.order_statistic_interval(0))

    def test_the_stated_level_is_exact_for_as_many_jobs_as_a_fleet_has(self):
        # Past about 1,150 units the first binomial terms are 0.0 in floats
        # and the sum starts after them: the interval is still the
        # narrowest that reaches 95%, of its exact coverage.
        for n in (1000, 1200, 4001, 55249):
            k, level = stats.order_statistic_interval(n)
            # The exact P(B <= i) for i < k + 1, one term from the other.
            below, term = [], 1
            for i in range(k + 1):
                below.append((below[-1] if below else 0) + term)
                term = term * (n - i) // (i + 1)

            def exact(k):
                return 1 - 2 * Fraction(below[k - 1], 2**n)

            self.assertAlmostEqual(level, float(exact(k)), places=9, msg=n)
            self.assertGreaterEqual(exact(k), Fraction(95, 100), n)
            self.assertLess(exact(k + 1), Fraction(95, 100), n)

    def test_every_stated_level_holds_on_simulated_jobs(self):
        # Jobs of 1 to 64 independent processes, each job with its own true
        # cost; each process adds its own offset (sigma 10 points, heavy-tailed
        # in half the jobs), and its value is the median of 1 to 64 pairs'
        # noise (sigma 3 points). The truth is the median of the processes'
        # distribution: the job's cost.
        rng = np.random.default_rng(20261202)
        simulated = 0
        for n in range(1, 65):
            jobs = jobs_for(n)
            truth = rng.uniform(-20, 40, size=jobs)
            offsets = np.where(
                rng.random(size=(jobs, 1)) < 0.5,
                rng.normal(0, 10, size=(jobs, n)),
                10 * rng.standard_t(3, size=(jobs, n)),
            )
            pairs = rng.integers(1, 65, size=(jobs, n))
            noise = rng.normal(0, 3 * 1.2533, size=(jobs, n)) / np.sqrt(pairs)
            values = truth[:, None] + offsets + noise
            covered, stated = 0, None
            for job in range(jobs):
                interval = stats.median_interval(values[job].tolist(), "processes")
                if n == 1:
                    self.assertIsNone(interval)
                    continue
                low, high = interval["percent"]
                covered += low <= truth[job] <= high
                stated = interval["level"]
                self.assertEqual(interval["units"], n)
                self.assertEqual(interval["over"], "processes")
                self.assertEqual(interval["meets_level"], n > FEW_UNITS)
            simulated += jobs
            if n > 1:
                self.assertLessEqual(
                    abs(covered / jobs - stated),
                    TOLERANCE,
                    f"{n} processes: stated {stated:.4f}, covered {covered / jobs:.4f}",
                )
        self.assertGreaterEqual(simulated, 2000)

    def test_a_negative_control_covers_zero_as_often_as_stated(self):
        # A/A: both passes of each pair from the same distribution (as in the
        # cpu_only class, where the mode changes nothing), so the true cost is
        # 0. Each process has its own speed; its value goes through the
        # report's own per-process function.
        rng = np.random.default_rng(7)
        for n in (2, 3, 4, 5, 6, 8, 12, 16, 32, 64):
            jobs = jobs_for(n)
            covered, stated = 0, None
            for _ in range(jobs):
                values = []
                for scale in rng.lognormal(16, 0.5, size=n):
                    m = int(rng.integers(1, 65))
                    durations = (scale * rng.lognormal(0, 0.1, size=(2, m))).astype(np.int64) + 1
                    values.append(stats.process_value(durations.T.tolist())[0])
                interval = stats.median_interval(values, "processes")
                low, high = interval["percent"]
                covered += low <= 0 <= high
                stated = interval["level"]
            self.assertLessEqual(
                abs(covered / jobs - stated),
                TOLERANCE,
                f"{n} processes: stated {stated:.4f}, covered {covered / jobs:.4f}",
            )

    def test_a_process_value_is_the_median_over_its_pairs(self):
        percent, difference = stats.process_value([(110, 100), (300, 200), (90, 100)])
        self.assertAlmostEqual(percent, 10.0)  # of +10%, +50%, -10%
        self.assertEqual(difference, 10.0)  # of 10, 100, -10
        percent, difference = stats.process_value([[110, 100], [150, 100]])
        self.assertAlmostEqual(percent, 30.0)
        self.assertEqual(difference, 30.0)

    def test_the_ranks_of_a_run_are_one_unit(self):
        cost = stats.ClassCost()
        for value in (10.0, 12.0, 14.0):
            cost.add((value, 1e6, 8), is_rank=True)
        summary = cost.summary()
        self.assertEqual((summary["units"], summary["over"]), (1, "runs"))
        self.assertEqual(summary["median_percent"], 12.0)
        self.assertIsNone(summary["interval"])
        self.assertEqual((summary["processes"], summary["ranks"], summary["pairs"]), (3, 3, 24))
        for value in (0.0, 1.0):
            cost.add((value, 1e6, 8), is_rank=False)
        summary = cost.summary()
        self.assertEqual((summary["units"], summary["over"]), (3, "runs and processes"))
        self.assertEqual(summary["median_percent"], 1.0)  # of 0, 1 and the run's 12
        self.assertEqual(summary["interval"]["percent"], [0.0, 12.0])
        self.assertEqual(summary["interval"]["level"], 0.75)

    def test_all_jobs_gives_each_job_one_vote(self):
        big, small = stats.ClassCost(), []
        for _ in range(100):
            big.add((50.0, 1e6, 8), is_rank=False)
        jobs = [{"single_accelerator": big.summary()}]
        for value in (-1.0, 0.0, 0.5, 1.0, 2.0, 3.0):
            one = stats.ClassCost()
            one.add((value, 1e6, 8), is_rank=False)
            jobs.append({"single_accelerator": one.summary()})
            small.append(value)
        everything = stats.over_jobs(jobs, ["single_accelerator"])["single_accelerator"]
        # Seven votes: the big job's +50 counts once.
        self.assertEqual(everything["median_percent"], 1.0)
        self.assertEqual((everything["units"], everything["over"]), (7, "jobs"))
        self.assertEqual(everything["processes"], 106)
        self.assertEqual(everything["interval"]["percent"], [-1.0, 50.0])
        self.assertGreaterEqual(everything["interval"]["level"], 0.95)

    def simulated_verdicts(self, rng, gap, spread, processes, jobs=JOBS):
        """Shares of compare_methods()'s verdicts on `jobs` simulated
        benchmark runs: `processes` processes whose differences between the
        methods spread normally by `spread` points around `gap`; and the
        level the verdicts held at."""
        verdicts, levels = [], set()
        for _ in range(jobs):
            found = stats.compare_methods(list(gap + rng.normal(0, spread, processes)), MARGIN)
            verdicts.append(found["verdict"])
            levels.add(found["level"])
        (level,) = levels
        return {v: verdicts.count(v) / jobs for v in ("agree", "differ", "inconclusive")}, level

    def test_the_benchmark_compares_at_the_size_these_tests_simulate(self):
        self.assertEqual(
            (BENCHMARK["COMPARISON_PROCESSES"], BENCHMARK["MARGIN"]), (PROCESSES, MARGIN)
        )

    def test_the_comparison_errs_no_more_often_than_its_level(self):
        rng = np.random.default_rng(5)
        for processes in (6, 9, PROCESSES, 24):
            for spread in (2.0, 10.0):
                # A gap at the margin is never called agreement beyond the
                # level; a gap within it, or none, is never called a
                # difference beyond it.
                found, level = self.simulated_verdicts(rng, MARGIN, spread, processes)
                self.assertLessEqual(found["agree"], 1 - level + TOLERANCE, (processes, found))
                for gap in (0.0, MARGIN / 2):
                    found, level = self.simulated_verdicts(rng, gap, spread, processes)
                    self.assertLessEqual(
                        found["differ"], 1 - level + TOLERANCE, (processes, gap, found)
                    )
        # The differences' median is what the interval is of: it holds its
        # level on skewed differences too.
        covered = 0
        for _ in range(JOBS):
            differences = rng.exponential(5.0, PROCESSES) - 5.0 * math.log(2)
            interval = stats.compare_methods(list(differences), MARGIN)["interval"]
            covered += interval["percent"][0] <= 0 <= interval["percent"][1]
        self.assertGreaterEqual(covered / JOBS, interval["level"] - TOLERANCE)

    def test_the_comparison_can_say_no_at_the_benchmarks_size(self):
        # The bar: a 20-point gap found at least 80% of the time, no
        # gap passed at least 90%, at the benchmark's size, where the
        # differences spread by up to SPREAD points.
        rng = np.random.default_rng(7)
        found, _ = self.simulated_verdicts(rng, 20.0, SPREAD, PROCESSES)
        self.assertGreaterEqual(found["differ"], 0.80, found)
        found, _ = self.simulated_verdicts(rng, -20.0, SPREAD, PROCESSES)
        self.assertGreaterEqual(found["differ"], 0.80, found)
        found, _ = self.simulated_verdicts(rng, 0.0, SPREAD, PROCESSES)
        self.assertGreaterEqual(found["agree"], 0.90, found)
        # With too few processes it cannot: no gap passes less often, and
        # the verdict holds below 95% (the units' range).
        found, level = self.simulated_verdicts(rng, 0.0, SPREAD, 5)
        self.assertLess(found["agree"], 0.90, found)
        self.assertLess(level, 0.95)
        self.assertEqual(stats.compare_methods([1.0], MARGIN)["verdict"], "inconclusive")


if __name__ == "__main__":
    run_tests()
