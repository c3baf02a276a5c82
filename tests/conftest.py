import torch

torch.manual_seed(0)
# Two cores are shared by the suite; keep torch from oversubscribing them.
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
