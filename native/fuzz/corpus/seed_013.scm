(cond ((assq 'b '((a 1) (b 2))) => car) (else 0))
