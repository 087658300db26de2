from benchmarks.tb_read import read_scalars as scalar_tags

__all__ = ["scalar_tags"]
