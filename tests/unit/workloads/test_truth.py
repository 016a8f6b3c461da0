import itertools

import pytest

from workloads.truth import NodeTruth, RunningJob, iteration_rates

TRUTH = NodeTruth()


def test_contention_never_rises_and_capacity_saturates() -> None:
    etas = [TRUTH.efficiency(d) for d in range(1, 80)]
    assert all(0 < eta <= 1.0 for eta in etas)
    assert all(later <= earlier + 1e-12 for earlier, later in itertools.pairwise(etas))
    assert TRUTH.efficiency(TRUTH.contention_free_workers) == 1.0
    capacities = [TRUTH.capacity(d) for d in range(1, 80)]
    assert capacities == sorted(capacities)
    assert capacities[-1] == pytest.approx(TRUTH.saturated_capacity, rel=0.01)


def test_step_time_grows_with_batch_and_pays_all_reduce_only_when_distributed() -> None:
    def step(batch: float, gpus: int) -> float:
        return TRUTH.step_time_s(
            batch_size_per_gpu=batch, flops=1.8e9, model_params=11.7e6, gpus=gpus
        )

    assert step(32, 1) < step(64, 1) < step(128, 1)
    # Not formula 6: a per-GPU batch twice as large costs less than twice the time.
    assert step(128, 1) < 2 * step(64, 1)
    assert step(64, 2) > step(64, 1)


def _job(job_id: str, gpus: tuple[int, ...], step: float, workers: int) -> RunningJob:
    return RunningJob(
        job_id, gpus, step, batch_size_per_gpu=64, workers_per_gpu=workers, sample_cost_s=0.0085
    )


def test_loader_bound_rate_scales_with_workers_without_contention() -> None:
    slow = iteration_rates(TRUTH, [_job("a", (0,), 0.001, 2)], 2)["a"]
    fast = iteration_rates(TRUTH, [_job("a", (0,), 0.001, 4)], 4)["a"]
    assert fast == pytest.approx(2 * slow, rel=0.01)


def test_gpu_bound_jobs_sharing_a_gpu_slow_each_other_down() -> None:
    alone = iteration_rates(TRUTH, [_job("a", (0,), 0.2, 16)], 16)["a"]
    shared = iteration_rates(TRUTH, [_job("a", (0,), 0.2, 8), _job("b", (0,), 0.2, 8)], 16)
    assert shared["a"] == pytest.approx(shared["b"])
    # Half the GPU each, less the cost of time-sharing.
    assert shared["a"] < alone / 2
    assert shared["a"] * 0.2 * (1 + TRUTH.share_overhead) * 2 == pytest.approx(1.0, rel=0.02)


def test_a_job_on_two_gpus_runs_at_its_slowest_gpu() -> None:
    rates = iteration_rates(TRUTH, [_job("wide", (0, 1), 0.1, 8), _job("hog", (1,), 0.3, 8)], 24)
    unshared = iteration_rates(TRUTH, [_job("wide", (0, 1), 0.1, 8)], 16)["wide"]
    assert rates["wide"] < unshared


DECODER = NodeTruth(decoder_cores=4.0, decode_fraction=0.5)  # K = 4 / (0.5 c) samples/s


def _device_job(job_id: str, gpu: int, share: float, workers: int = 8) -> RunningJob:
    return RunningJob(
        job_id,
        (gpu,),
        0.001,  # a fast GPU: loading limits
        batch_size_per_gpu=64,
        workers_per_gpu=workers,
        sample_cost_s=DECODER.device_cost("imagenet"),
        decoder_share=share,
    )


def test_the_decoder_serves_device_jobs_by_share_up_to_its_capacity() -> None:
    capacity = DECODER.decoder_capacity("imagenet")
    assert capacity == pytest.approx(4.0 / (0.5 * 0.0085))
    rates = iteration_rates(DECODER, [_device_job("a", 0, 0.25), _device_job("b", 1, 0.75)], 16)
    served = {job_id: rate * 64 for job_id, rate in rates.items()}
    assert served["a"] + served["b"] == pytest.approx(capacity, rel=0.01)
    assert served["b"] == pytest.approx(3 * served["a"], rel=0.01)


def test_a_share_a_job_cannot_use_goes_to_the_other_device_job() -> None:
    # `a` has one worker: it augments far less than its half of the decoder.
    rates = iteration_rates(
        DECODER, [_device_job("a", 0, 0.5, workers=1), _device_job("b", 1, 0.5)], 9
    )
    served = {job_id: rate * 64 for job_id, rate in rates.items()}
    capacity = DECODER.decoder_capacity("imagenet")
    assert served["a"] < 0.5 * capacity
    assert served["a"] + served["b"] == pytest.approx(capacity, rel=0.01)


def test_device_mode_frees_the_cpu_of_decoding() -> None:
    on_cpu = RunningJob("a", (0,), 0.001, 64, workers_per_gpu=2, sample_cost_s=0.0085)
    cpu_rate = iteration_rates(DECODER, [on_cpu], 2)["a"]
    device_rate = iteration_rates(DECODER, [_device_job("a", 0, 1.0, workers=2)], 2)["a"]
    assert device_rate == pytest.approx(2 * cpu_rate, rel=0.02)  # half the cost was decoding
