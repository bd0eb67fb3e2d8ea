"""Applies the power-of-two divisions to every size, even one no bigger than 512 B x divisions."""
EXERCISE = "lab2.round_size"
EXPECTED_REASON = "divisions do not apply"


def SUBMISSION(size, config):
    if size < 512:
        return 512
    div = config.divisions_for(size)
    if div > 1:
        floor = 1 << (size.bit_length() - 1)
        step = max(1, floor // div)
        return -(-size // step) * step
    return -(-size // 512) * 512
