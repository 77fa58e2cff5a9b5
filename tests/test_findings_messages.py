"""Finding messages say what their rows say (counts per launch API, not the first row's API)."""

from tracekit.analysis import findings


def _template(query: str) -> str:
    return next(r.message for r in findings.rules() if r.id == query)


def test_occupancy_message_counts_each_launch_api():
    # The shape of a real trace: one kernel name via cuLaunchKernel, two names via cudaLaunchKernelExC.
    rows = [
        {"trace": "t", "launch_api": "cudaLaunchKernelExC", "name": "a", "launches": 100},
        {"trace": "t", "launch_api": "cudaLaunchKernelExC", "name": "b", "launches": 68},
        {"trace": "t", "launch_api": "cuLaunchKernel", "name": "c", "launches": 1},
    ]
    text = findings.message(_template("zero_reported_occupancy"), rows)
    assert "cudaLaunchKernelExC: 168, cuLaunchKernel: 1" in text
    assert "169" not in text


def test_occupancy_message_on_the_cudnn_sample(post_traces):
    trace, variant = post_traces["cudnn"]
    fired = [f for f in findings.run(trace) if f.id == "zero_reported_occupancy"]
    assert len(fired) == 1
    # By construction: one cuDNN kernel per forward, one forward per step.
    launches = len(variant.truth["steps"]) * variant.truth["gpu_ops_per_forward"]
    assert launches == 3
    assert f"(kernels per API: cuLaunchKernelEx: {launches})" in fired[0].message
