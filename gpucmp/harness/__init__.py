"""gpucmp.harness: compare how models run on one GPU and project them onto another.

Kept free of imports (in particular of the compiled core) so that submodules such as
gpucmp.harness.specs load on their own.
"""
