"""Takes the OLDEST accepting entry: right while contexts do not nest, wrong inside nested ones."""
EXERCISE = "lab8.get_pool"
EXPECTED_REASON = "your pool differs from get_pool's choice"


def SUBMISSION(captures, size, stream):
    kind = "small" if size <= 1024 * 1024 else "large"
    for pool_id, accepts in captures:
        if accepts(stream):
            return pool_id, kind
    return (0, 0), kind
