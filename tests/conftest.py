import pytest
import torch

torch.manual_seed(0)
# Two cores are shared by the suite; keep torch from oversubscribing them.
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (two threads on shared cores spin-wait).

    A test module opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo process group of this one process (context parallelism on one rank), destroyed after the test."""
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
