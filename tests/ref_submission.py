"""A submission backed by the reference: lets the harness be tested without a B200 kernel."""
from reference import ref_kernel
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    return ref_kernel(data)
