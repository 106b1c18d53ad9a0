((lambda (x) x))
