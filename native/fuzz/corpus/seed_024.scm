(expt 2 10) (expt 2.0 0.5) (exact->inexact 1/3)
