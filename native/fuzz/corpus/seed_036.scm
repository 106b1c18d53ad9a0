(let loop ((l '())) (loop (cons 1.0 l)))
