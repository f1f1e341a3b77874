# torch.distributed all_reduce (gloo, 2 processes) of 1024 f32 values, mean of 200 calls.
import gloo
if __name__ == "__main__":
    gloo.main(1024, 200)
