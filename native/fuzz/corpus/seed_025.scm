(atan 1 -1) (asin 0.5) (acos 0.5) (tan 0.3) (sqrt -1.0) (log 0)
