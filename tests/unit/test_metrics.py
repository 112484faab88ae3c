from gpu_scheduling.scheduler.metrics import Metrics


def test_histogram_is_cumulative():
    m = Metrics()
    for s in (0.001, 0.02, 3.0, 10.0):
        m.observe_bind(s)
    text = m.render()
    assert 'gpu_scheduler_bind_duration_seconds_bucket{le="0.005"} 1' in text
    assert 'gpu_scheduler_bind_duration_seconds_bucket{le="0.025"} 2' in text
    assert 'gpu_scheduler_bind_duration_seconds_bucket{le="5.0"} 3' in text
    assert 'gpu_scheduler_bind_duration_seconds_bucket{le="+Inf"} 4' in text
    assert "gpu_scheduler_bind_duration_seconds_count 4" in text
