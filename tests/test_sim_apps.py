"""Tests of the elastic application model (schedulearn.sim.apps) and the
workload reader (schedulearn.sim.workload).

Expected values are computed by hand from the quoted rows of the profile CSVs
in scheduler/schedulearn/sim/data/pollux/ (copies of the Pollux artifact's profiles; see its NOTICE).
"""

from __future__ import annotations

import math

import pytest
from schedulearn.sim.apps import (
    APPLICATIONS,
    canonical_placement,
    get_profile,
    load_profiles,
)
from schedulearn.sim.workload import WorkloadJob, is_workload_csv, read_workload


def eff(sqr: float, var: float, s: float) -> float:
    """The README's per-step statistical efficiency."""
    return (var + sqr) / (var / s + sqr)


# --------------------------------------------------------------- profiles
def test_profile_constants():
    profiles = load_profiles()
    assert sorted(profiles) == list(APPLICATIONS)
    y = profiles["yolov3"]
    assert (y.max_local_bsz, y.init_batch_size, y.max_batch_size, y.epochs) == (8, 8, 512, 50)
    c = profiles["cifar10"]
    assert (c.max_local_bsz, c.init_batch_size, c.max_batch_size, c.epochs) == (1024, 128, 4096, 100)
    # bert: epoch 2 progress over validation-{12,24,48,96,192,384}.csv row 2:
    # 14774.0, 14774.647..., 14776.83..., 14778.21..., 14775.73..., 14789.67... -> min 14774.0
    assert profiles["bert"].target_progress == 14774.0
    assert profiles["bert"].epoch_progress == (0.0, 7387.0, 14774.0)
    assert load_profiles() is not load_profiles()  # a copy of the cached dict
    assert load_profiles()["bert"] is load_profiles()["bert"]


def test_canonical_placement_rotates_not_permutes():
    assert canonical_placement((2, 1, 1)) == (1, 1, 2)
    assert canonical_placement((0, 4, 0, 2)) == (2, 4)
    # 1-3-1-2 rotations: 1312, 3121, 1213, 2131 -> 1213 (a permutation would give 1123)
    assert canonical_placement((1, 3, 1, 2)) == (1, 2, 1, 3)


# -------------------------------------------------------------- step time
def test_step_time_placement_row_at_profiled_local_batch():
    # bert placements.csv: "112,8,1.27931647002697,0.634420925140381".
    # (2,1,1) rotates to 112; B=32 on 4 GPUs -> local 8 <= max_local 12, no accumulation.
    bert = get_profile("bert")
    assert bert.step_time((2, 1, 1), 32) == pytest.approx(1.27931647002697, rel=1e-12)
    assert bert.step_time((1, 2, 1), 32) == pytest.approx(1.27931647002697, rel=1e-12)
    # cifar10 placements.csv: "2,64,0.06547343730926514,..."; B=128 on 2 GPUs -> local 64.
    assert get_profile("cifar10").step_time((2,), 128) == pytest.approx(0.06547343730926514, rel=1e-12)


def test_step_time_interpolates_between_local_batch_rows():
    # cifar10 "4,45,0.06267681121826171" and "4,64,0.06841483116149902";
    # B=200 on 4 GPUs -> local 50:
    # 0.06267681121826171 + (50-45)/(64-45) * (0.06841483116149902-0.06267681121826171)
    # = 0.06418681646648206
    assert get_profile("cifar10").step_time((4,), 200) == pytest.approx(0.06418681646648206, rel=1e-9)


def test_step_time_without_placement_row_uses_configuration_means_and_scalability():
    imagenet = get_profile("imagenet")
    # Five nodes: no row in placements.csv. (1,1,1,1,1): n=5, r=5, u=r/n=1, local 40 (B=200).
    # n=4 at u=1 -> (4 nodes, 4 GPUs): only placement 1111: "1111,40,0.3229727029800415"
    # n=6 at u=1 -> scalability.csv "6,6,40,0.44641757011413574"
    # halfway (n=5): (0.3229727029800415 + 0.44641757011413574) / 2 = 0.38469513654708865
    assert imagenet.step_time((1, 1, 1, 1, 1), 200) == pytest.approx(0.38469513654708865, rel=1e-9)
    # (2,2,2,2,2): n=5, r=10, u=2, local 40 (B=400).
    # n=4 at u=2 -> (4, 8): mean of placements 1124, 1133, 1142, 1214, 1223, 1232, 1313, 1322,
    # 2222 at local 40: (0.41692922 + 0.38363416 + 0.38401041 + 0.39694407 + 0.41306203
    #  + 0.35723977 + 0.40851517 + 0.32663848 + 0.42637303) / 9 = 0.3903718153635661
    # n=6 at u=2 -> scalability "6,12,40,0.450750470161438"
    # halfway: (0.3903718153635661 + 0.450750470161438) / 2 = 0.420561142762502
    assert imagenet.step_time((2, 2, 2, 2, 2), 400) == pytest.approx(0.420561142762502, rel=1e-9)


def test_gradient_accumulation_above_max_local_batch():
    yolo = get_profile("yolov3")
    cfg = yolo.configure((4,), 64)
    # local = ceil(64/4) = 16 > max_local 8: a = ceil(16/8) - 1 = 1, micro = ceil(16/2) = 8
    assert (cfg.local_bsz, cfg.accum_steps, cfg.micro_bsz, cfg.effective_batch_size) == (16, 1, 8, 64)
    # yolov3 "4,8,0.5009251087903976,0.11896183347702027":
    # 0.5009251087903976 + 1 * (0.5009251087903976 - 0.11896183347702027) = 0.882888384103775
    assert yolo.step_time((4,), 64) == pytest.approx(0.882888384103775, rel=1e-12)


def test_micro_batch_capped_at_max_batch_size_like_the_original():
    bert = get_profile("bert")
    # B=384 on 12 GPUs: local 32, a = ceil(32/12)-1 = 2, micro ceil(32/3) = 11, but
    # 12*3*11 = 396 > 384 = max_batch_size, so micro = floor(384/36) = 10 -> 360 samples.
    cfg = bert.configure((4, 4, 4), 384)
    assert (cfg.accum_steps, cfg.micro_bsz, cfg.effective_batch_size) == (2, 10, 360)


def test_one_gpu_accumulation_rule():
    cifar = get_profile("cifar10")
    # B=364 > init 128 on 1 GPU: local 364 <= max_local 1024 would need a=0, but on one GPU
    # the published simulator uses a >= 1: micro = ceil(364/2) = 182.
    cfg = cifar.configure((1,), 364)
    assert (cfg.accum_steps, cfg.micro_bsz) == (1, 182)
    # cifar10 "1,182,0.13722496032714843,0.0005333151996135711":
    # 0.13722496032714843 + (0.13722496032714843 - 0.0005333151996135711) = 0.27391660545468327
    assert cifar.step_time((1,), 364) == pytest.approx(0.27391660545468327, rel=1e-12)
    # At B = init batch size there is no forced accumulation.
    assert cifar.configure((1,), 128).accum_steps == 0
    # ...nor on two GPUs.
    assert cifar.configure((2,), 364).accum_steps == 0


# ------------------------------------------------------------- efficiency
def test_efficiency_is_one_at_initial_batch_size():
    for prof in load_profiles().values():
        for progress in (0.0, prof.epoch_progress[1], prof.target_progress * 0.7):
            assert prof.efficiency(progress, prof.init_batch_size) == pytest.approx(1.0, rel=1e-12)


def test_efficiency_uses_epoch_stats_interpolated_between_batch_sizes():
    cifar = get_profile("cifar10")
    # Epoch boundaries: row 3 progress min over B = 1171.9635319400413 (validation-2048),
    # row 4 min = 1563.0 (validation-128), so progress 1300 is in epoch index 3 (4th row).
    assert cifar.epoch_progress[3] == 1171.9635319400413
    assert cifar.epoch_progress[4] == 1563.0
    assert cifar.epoch_of(1300.0) == 3
    # Row 4: validation-256 grad_sqr 0.6385792401233752, grad_var 1.5625150232640328;
    #        validation-512 grad_sqr 0.3872436455714017, grad_var 1.9151549389614637.
    # B=384 is halfway: sqr 0.5129114428473884, var 1.7388349811127481, s = 384/128 = 3:
    # (1.7388 + 0.5129) / (1.7388/3 + 0.5129) = 2.061051539621492
    assert cifar.efficiency(1300.0, 384) == pytest.approx(2.061051539621492, rel=1e-9)
    # Exactly at a boundary the next epoch's statistics apply.
    assert cifar.epoch_of(1563.0) == 4


def test_goodput_is_efficiency_over_step_time():
    cifar = get_profile("cifar10")
    # B=256 on (4,): local 64, no accumulation, 256 samples per step.
    expected = cifar.efficiency(100.0, 256) / 0.06841483116149902
    assert cifar.goodput((4,), 256, 100.0) == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------- advance
def test_advance_across_an_epoch_boundary_is_the_sum_of_the_two_pieces():
    cifar = get_profile("cifar10")
    # (4,), B=256: step time T = 0.06841483116149902 ("4,64" row), s = 2.
    # Epoch 0 ends at P1 = 390.71438596642224 (validation-256 row 1).
    # g0 from validation-256 row 1 (sqr 17.379458169870425, var 13.937760473946334) = 1.2862158444
    # g1 from validation-256 row 2 (sqr 2.808521096534845, var 2.8374590058527493) = 1.3356151876
    T = 0.06841483116149902
    g0 = eff(17.379458169870425, 13.937760473946334, 2)
    g1 = eff(2.808521096534845, 2.8374590058527493, 2)
    t1 = (390.71438596642224 - 380.0) / g0 * T  # 0.5699066063293698 s to the boundary
    expected = 390.71438596642224 + (10.0 - t1) / T * g1  # 574.8115436023626
    assert expected == pytest.approx(574.8115436023626, rel=1e-12)
    progress, done = cifar.advance(380.0, (4,), 256, 10.0)
    assert done is None
    assert progress == pytest.approx(expected, rel=1e-12)
    # Splitting the interval anywhere gives the same result.
    mid, _ = cifar.advance(380.0, (4,), 256, 3.7)
    again, _ = cifar.advance(mid, (4,), 256, 6.3)
    assert again == pytest.approx(expected, rel=1e-12)


def test_completion_time():
    bert = get_profile("bert")
    # (4,), B=48: local 12 = max_local, no accumulation; "4,12,0.9571182131767273" -> T.
    # s = 48/12 = 4; validation-48 row 1: sqr 57286300666507.94, var 6875640191433787.0
    # -> g0 = 3.903243297317752; row 2: sqr 69055119274.80128, var 43961892733847.03
    # -> g1 = 3.9812681560954877. Epochs 0..7387.0 and 7387.0..14774.0:
    # (7387/g0 + 7387/g1) * 0.9571182131767273 = 3587.2481074877496 s
    T = 0.9571182131767273
    jct = (
        7387.0 / eff(57286300666507.94, 6875640191433787.0, 4)
        + 7387.0 / eff(69055119274.80128, 43961892733847.03, 4)
    ) * T
    assert jct == pytest.approx(3587.2481074877496, rel=1e-12)
    assert bert.time_to_complete(0.0, (4,), 48) == pytest.approx(jct, rel=1e-12)
    progress, done = bert.advance(0.0, (4,), 48, 10_000.0)
    assert progress == bert.target_progress == 14774.0
    assert done == pytest.approx(jct, rel=1e-12)
    assert bert.advance(0.0, (4,), 48, math.inf) == (14774.0, pytest.approx(jct, rel=1e-12))
    progress, done = bert.advance(0.0, (4,), 48, jct - 1.0)
    assert done is None and progress < 14774.0
    # In 60 s rounds: completes in round 60 (3540 < jct <= 3600), 47.248... s into it.
    p, done, rounds = 0.0, None, 0
    while done is None:
        p, done = bert.advance(p, (4,), 48, 60.0)
        rounds += 1
    assert rounds == 60
    assert done == pytest.approx(jct - 59 * 60, rel=1e-9)
    # Already complete: no time needed.
    assert bert.advance(14774.0, (4,), 48, 60.0) == (14774.0, 0.0)


def test_best_batch_size_is_in_range_and_maximises_goodput():
    cifar = get_profile("cifar10")
    for placement in ((1,), (4,), (4, 4), (4, 4, 4, 4)):
        b = cifar.best_batch_size(placement, 500.0)
        assert cifar.init_batch_size <= b <= cifar.max_batch_size
        best = cifar.goodput(placement, b, 500.0)
        for other in (128, 256, 512, 1024, 2048, 4096):
            assert best >= cifar.goodput(placement, other, 500.0) * (1 - 1e-12)
    bert = get_profile("bert")
    assert bert.best_batch_size((4,) * 16, 0.0) >= 64  # B >= number of GPUs
    with pytest.raises(ValueError, match="no batch size"):
        bert.best_batch_size((4,) * 100, 0.0)  # 400 GPUs > max_batch_size 384


def test_unknown_application():
    with pytest.raises(ValueError) as err:
        get_profile("resnet")
    assert str(err.value) == (
        "application: unknown 'resnet'; expected one of bert, cifar10, deepspeech2, imagenet, ncf, yolov3"
    )


# --------------------------------------------------------------- workload
def test_read_real_workload(traces):
    path = traces / "pollux" / "workloads" / "workload-1.csv"
    assert is_workload_csv(path)
    assert not is_workload_csv(traces / "philly.csv")
    jobs = read_workload(path)
    assert len(jobs) == 160
    # first row: "cifar10-0,107,cifar10,6,2048"
    assert jobs[0] == WorkloadJob("cifar10-0", 107.0, "cifar10", 6, 2048)
    assert isinstance(jobs[0].submit_time, float)
    assert {j.application for j in jobs} <= set(APPLICATIONS)


def test_read_malformed_workload(tmp_path):
    path = tmp_path / "workload-1.csv"
    path.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,4,512\nb,5,bert,x,384\n")
    with pytest.raises(ValueError) as err:
        read_workload(path)
    assert str(err.value) == f"{path}:3: num_replicas: expected an integer >= 1, got 'x'"

    path.write_text("name,time,application,num_replicas,batch_size\na,0,resnet,4,512\n")
    with pytest.raises(ValueError, match=r":2: application: unknown 'resnet'; expected one of bert"):
        read_workload(path)

    path.write_text("name,time,application,num_replicas,batch_size\na,-1,ncf,1,512\n")
    with pytest.raises(ValueError, match=r":2: time: expected a number of seconds from 0 to 315,360,000, "
                                         r"got '-1'"):
        read_workload(path)

    # past 10 years, a slip of units: at 1e300 a job's run time vanished from its completion time
    path.write_text("name,time,application,num_replicas,batch_size\na,1e300,ncf,1,512\n")
    with pytest.raises(ValueError, match=r":2: time: expected a number of seconds from 0 to 315,360,000, "
                                         r"got '1e300'"):
        read_workload(path)
    path.write_text("name,time,application,num_replicas,batch_size,deadline\na,0,ncf,1,512,1e12\n")
    with pytest.raises(ValueError, match=r":2: deadline: expected seconds > 0 after arrival, "
                                         r"at most 315,360,000"):
        read_workload(path)

    # a batch past the largest validated one: the model's gradient accumulation grew without end
    # (a batch of 1e20 simulated for ever)
    path.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,4097\n")
    with pytest.raises(ValueError) as err:
        read_workload(path)
    assert str(err.value) == (f"{path}:2: batch_size: expected an integer from 1 to 4096 (cifar10's largest "
                              "validated batch size), got 4097")
    path.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,4096\nb,0,yolov3,2,1\n")
    assert [j.batch_size for j in read_workload(path)] == [4096, 1]

    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n1,2,3,4,5\n")
    assert not is_workload_csv(path)
    with pytest.raises(ValueError, match=r":1: header: expected"):
        read_workload(path)
