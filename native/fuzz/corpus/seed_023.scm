(quotient -7 2) (remainder -7 2) (modulo -7 2)
