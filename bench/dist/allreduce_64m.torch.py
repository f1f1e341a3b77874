# torch.distributed all_reduce (gloo, 2 processes) of 16777216 f32 values, mean of 5 calls.
import gloo
if __name__ == "__main__":
    gloo.main(16777216, 5)
