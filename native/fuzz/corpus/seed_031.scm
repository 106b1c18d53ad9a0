(param a 0.5) (if (> a 0.1) (* a a) (sin a))
