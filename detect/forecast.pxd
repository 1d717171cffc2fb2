# The compiled build's C math for forecast.py (pure mode cannot cimport it): the .py
# binds Python's math functions under the same names when it runs uncompiled.
from libc.math cimport exp, isfinite, log, sqrt
