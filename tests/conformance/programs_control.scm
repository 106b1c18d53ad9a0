; Conformance programs: proper tail calls, closures, higher-order functions, recursion.

;;; tail-loop-100k-if
(define (count n acc) (if (= n 0) acc (count (- n 1) (+ acc 1))))
(count 100000 0)

;;; tail-loop-100k-cond
(define (count n acc)
  (cond ((= n 0) acc)
        ((even? n) (count (- n 1) (+ acc 2)))
        (else (count (- n 1) (- acc 1)))))
(count 100000 0)

;;; tail-loop-100k-and
(define (all-small? n) (or (= n 0) (and (< n 1000000) (all-small? (- n 1)))))
(all-small? 100000)

;;; tail-loop-100k-or
(define (find-zero n) (or (= n 0) (find-zero (- n 1))))
(find-zero 100000)

;;; tail-loop-100k-when
(define (walk n) (when (>= n 0) (if (= n 0) 'bottom (walk (- n 1)))))
(walk 100000)

;;; tail-loop-100k-unless
(define (walk n) (unless (< n 0) (if (= n 0) 'done (walk (- n 1)))))
(walk 100000)

;;; tail-loop-100k-case
(define (walk n acc)
  (case (remainder n 3)
    ((0) (if (= n 0) acc (walk (- n 1) (+ acc 3))))
    ((1) (walk (- n 1) (+ acc 1)))
    (else (walk (- n 1) acc))))
(walk 100000 0)

;;; tail-loop-100k-begin-let
(define (walk n acc)
  (begin
    (let ((m (- n 1)))
      (let* ((a (+ acc 0.5)))
        (if (< m 0) acc (walk m a))))))
(walk 100000 0.0)

;;; tail-loop-100k-named-let
(let loop ((i 0) (s 0.0))
  (if (= i 100000) s (loop (+ i 1) (+ s 0.25))))

;;; tail-loop-100k-do
(do ((i 0 (+ i 1)) (s 0 (+ s 2))) ((= i 100000) s))

;;; tail-mutual-recursion-100k
(define (ev? n) (if (= n 0) #t (od? (- n 1))))
(define (od? n) (if (= n 0) #f (ev? (- n 1))))
(list (ev? 100000) (od? 100001))

;;; tail-call-through-apply
(define (count n) (if (= n 0) 'finished (apply count (list (- n 1)))))
(count 100000)

;;; tail-call-through-closure-argument
(define (trampoline f n) (if (= n 0) 'ok (f f (- n 1))))
(trampoline trampoline 100000)

;;; tail-loop-100k-letrec
(letrec ((go (lambda (n acc) (if (= n 0) acc (go (- n 1) (+ acc n))))))
  (go 100000 0))

;;; recursion-non-tail-depth-1000
(define (sum n) (if (= n 0) 0 (+ n (sum (- n 1)))))
(sum 1000)

;;; recursion-non-tail-depth-5000
(define (len lst) (if (null? lst) 0 (+ 1 (len (cdr lst)))))
(define (build n acc) (if (= n 0) acc (build (- n 1) (cons n acc))))
(len (build 5000 '()))

;;; recursion-factorial-20
(define (fact n) (if (= n 0) 1 (* n (fact (- n 1)))))
(fact 20)

;;; recursion-fib-tree
(define (fib n) (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2)))))
(fib 18)

;;; recursion-ackermann-small
(define (ack m n)
  (cond ((= m 0) (+ n 1))
        ((= n 0) (ack (- m 1) 1))
        (else (ack (- m 1) (ack m (- n 1))))))
(ack 2 3)

;;; recursion-gcd
(define (gcd2 a b) (if (= b 0) a (gcd2 b (remainder a b))))
(list (gcd2 48 36) (gcd2 17 5) (gcd2 1071 462))

;;; recursion-power-fast
(define (pow b e)
  (cond ((= e 0) 1)
        ((even? e) (square (pow b (quotient e 2))))
        (else (* b (pow b (- e 1))))))
(pow 3 13)

;;; recursion-hanoi-moves
(define (hanoi n) (if (= n 0) 0 (+ 1 (* 2 (hanoi (- n 1))))))
(hanoi 16)

;;; recursion-collatz-steps
(define (collatz n steps)
  (cond ((= n 1) steps)
        ((even? n) (collatz (quotient n 2) (+ steps 1)))
        (else (collatz (+ (* 3 n) 1) (+ steps 1)))))
(collatz 27 0)

;;; recursion-newton-sqrt
(define (newton x)
  (let loop ((g 1.0) (k 0))
    (if (= k 30) g (loop (/ (+ g (/ x g)) 2) (+ k 1)))))
(newton 2.0)

;;; closure-make-adder
(define (make-adder n) (lambda (x) (+ x n)))
(define add5 (make-adder 5))
(define add10 (make-adder 10))
(list (add5 1) (add10 1) (add5 (add10 0)))

;;; closure-captures-loop-variable
(define closures
  (let loop ((i 0) (acc '()))
    (if (= i 4) (reverse acc) (loop (+ i 1) (cons (lambda () (* i i)) acc)))))
(map (lambda (c) (c)) closures)

;;; closure-compose
(define (compose . fs)
  (if (null? fs) (lambda (x) x)
      (lambda (x) ((car fs) ((apply compose (cdr fs)) x)))))
((compose (lambda (x) (* x 2)) (lambda (x) (+ x 3)) (lambda (x) (- x 1))) 10)

;;; closure-curry
(define (curry f) (lambda (a) (lambda (b) (f a b))))
(((curry -) 10) 3)

;;; closure-counter-functional
(define (make-counter n) (cons n (lambda () (make-counter (+ n 1)))))
(define c3 ((cdr ((cdr ((cdr (make-counter 0))))))))
(car c3)

;;; closure-returned-from-internal-define
(define (outer a)
  (define (inner b) (+ a b))
  inner)
((outer 100) 23)

;;; closure-over-closure
(define (twice f) (lambda (x) (f (f x))))
(((twice twice) (lambda (x) (+ x 1))) 0)

;;; closure-in-data-structure
(define ops (list (cons 'add +) (cons 'mul *) (cons 'sub -)))
(define (run op a b) ((cdr (assq op ops)) a b))
(list (run 'add 3 4) (run 'mul 3 4) (run 'sub 3 4))

;;; closure-y-combinator
(define Y
  (lambda (f)
    ((lambda (x) (f (lambda (v) ((x x) v))))
     (lambda (x) (f (lambda (v) ((x x) v)))))))
(define fact (Y (lambda (self) (lambda (n) (if (= n 0) 1 (* n (self (- n 1))))))))
(fact 10)

;;; closure-church-numerals
(define zero (lambda (f) (lambda (x) x)))
(define (succ n) (lambda (f) (lambda (x) (f ((n f) x)))))
(define (church->int n) ((n (lambda (k) (+ k 1))) 0))
(church->int (succ (succ (succ zero))))

;;; hof-fold-left
(define (fold-left f acc lst) (if (null? lst) acc (fold-left f (f acc (car lst)) (cdr lst))))
(fold-left - 0 '(1 2 3 4))

;;; hof-fold-right
(define (fold-right f init lst) (if (null? lst) init (f (car lst) (fold-right f init (cdr lst)))))
(fold-right - 0 '(1 2 3 4))

;;; hof-filter
(define (filter keep? lst)
  (cond ((null? lst) '())
        ((keep? (car lst)) (cons (car lst) (filter keep? (cdr lst))))
        (else (filter keep? (cdr lst)))))
(filter odd? '(1 2 3 4 5 6 7))

;;; hof-reduce-max
(define (reduce f lst) (if (null? (cdr lst)) (car lst) (f (car lst) (reduce f (cdr lst)))))
(reduce max '(3 9 2 7))

;;; hof-map-lambda
(map (lambda (x) (* x x)) '(1 2 3 4))

;;; hof-map-primitive
(map abs '(-1 2 -3.5))

;;; hof-map-two-lists
(map + '(1 2 3) '(10 20 30))

;;; hof-map-three-lists
(map (lambda (a b c) (list a b c)) '(1 2) '(x y) '(#t #f))

;;; hof-map-nested
(map (lambda (row) (map (lambda (x) (* 10 x)) row)) '((1 2) (3) ()))

;;; hof-map-empty
(map car '())

;;; hof-apply-primitive
(apply + '(1 2 3 4))

;;; hof-apply-with-leading-args
(apply + 1 2 '(3 4))

;;; hof-apply-lambda
(apply (lambda (a b . c) (list a b c)) '(1 2 3 4))

;;; hof-apply-max
(apply max '(3 1 4 1 5 9 2 6))

;;; hof-apply-empty-list
(apply * '())

;;; hof-function-as-argument-primitive
(define (apply-twice f x) (f (f x)))
(apply-twice cdr '(1 2 3 4))

;;; hof-quicksort
(define (filter keep? lst)
  (cond ((null? lst) '())
        ((keep? (car lst)) (cons (car lst) (filter keep? (cdr lst))))
        (else (filter keep? (cdr lst)))))
(define (qsort lst)
  (if (null? lst) '()
      (let ((p (car lst)) (rest (cdr lst)))
        (append (qsort (filter (lambda (x) (< x p)) rest))
                (list p)
                (qsort (filter (lambda (x) (>= x p)) rest))))))
(qsort '(3 1 4 1 5 9 2 6 5 3 5))

;;; hof-insertion-sort-floats
(define (insert x sorted)
  (if (or (null? sorted) (<= x (car sorted))) (cons x sorted)
      (cons (car sorted) (insert x (cdr sorted)))))
(define (isort lst) (if (null? lst) '() (insert (car lst) (isort (cdr lst)))))
(isort '(2.5 -1.0 3.25 0.0 1.5))

;;; hof-merge-sort
(define (take lst n) (if (= n 0) '() (cons (car lst) (take (cdr lst) (- n 1)))))
(define (merge a b)
  (cond ((null? a) b) ((null? b) a)
        ((< (car a) (car b)) (cons (car a) (merge (cdr a) b)))
        (else (cons (car b) (merge a (cdr b))))))
(define (msort lst)
  (let ((n (length lst)))
    (if (< n 2) lst
        (let ((h (quotient n 2)))
          (merge (msort (take lst h)) (msort (list-tail lst h)))))))
(msort '(8 3 5 1 9 2 7 4 6 0))

;;; hof-primes-sieve
(define (range a b) (if (>= a b) '() (cons a (range (+ a 1) b))))
(define (remove-multiples p lst)
  (cond ((null? lst) '())
        ((= 0 (remainder (car lst) p)) (remove-multiples p (cdr lst)))
        (else (cons (car lst) (remove-multiples p (cdr lst))))))
(define (sieve lst) (if (null? lst) '() (cons (car lst) (sieve (remove-multiples (car lst) (cdr lst))))))
(sieve (range 2 60))

;;; hof-assoc-list-update
(define (update alist key val)
  (cond ((null? alist) (list (cons key val)))
        ((eq? (car (car alist)) key) (cons (cons key val) (cdr alist)))
        (else (cons (car alist) (update (cdr alist) key val)))))
(define db (update (update (update '() 'a 1) 'b 2) 'a 3))
(map cdr db)

;;; hof-tree-sum
(define (tree-sum t)
  (cond ((null? t) 0)
        ((pair? t) (+ (tree-sum (car t)) (tree-sum (cdr t))))
        ((number? t) t)
        (else 0)))
(tree-sum '(1 (2 3) ((4) 5 (6 (7 x)))))

;;; hof-flatten
(define (flatten t)
  (cond ((null? t) '())
        ((pair? t) (append (flatten (car t)) (flatten (cdr t))))
        (else (list t))))
(flatten '(1 (2 (3 4)) ((5)) 6))

;;; hof-horner-polynomial
(define (horner coeffs x) (fold coeffs x 0.0))
(define (fold cs x acc) (if (null? cs) acc (fold (cdr cs) x (+ (* acc x) (car cs)))))
(horner '(2.0 -3.0 0.5 1.0) 1.5)

;;; hof-numeric-integration
(define (integrate f a b n)
  (let ((h (/ (- b a) n)))
    (let loop ((i 0) (s 0.0))
      (if (= i n) (* h s) (loop (+ i 1) (+ s (f (+ a (* h (+ i 0.5))))))))))
(integrate (lambda (x) (* x x)) 0.0 1.0 1000)

;;; hof-simple-evaluator
(define (ev e env)
  (cond ((number? e) e)
        ((symbol? e) (cdr (assq e env)))
        ((eq? (car e) 'add) (+ (ev (cadr e) env) (ev (caddr e) env)))
        ((eq? (car e) 'mul) (* (ev (cadr e) env) (ev (caddr e) env)))
        (else 'bad)))
(ev '(add (mul x 3) (add y 1.5)) (list (cons 'x 2) (cons 'y 10)))

;;; tail-in-case-else
(define (f n) (case n ((0) 'z) (else (f (- n 1)))))
(f 200000)

;;; tail-in-do-result
(define (g n) (if (= n 0) 'done (do ((i 0 (+ i 1))) ((= i 1) (g (- n 1))))))
(g 100000)

;;; tail-in-let-star-body
(define (f n) (let* ((m (- n 1))) (if (< m 0) 'ok (f m))))
(f 200000)

;;; tail-in-letrec-body
(define (f n) (letrec ((k n)) (if (= k 0) 'ok (f (- k 1)))))
(f 200000)

;;; tail-in-internal-define-body
(define (f n) (define k (- n 1)) (if (< k 0) 'ok (f k)))
(f 200000)

;;; tail-in-when-last
(define (f n) (when #t 1 (if (= n 0) 'ok (f (- n 1)))))
(f 200000)

;;; tail-in-lambda-immediate
(define (f n) ((lambda () (if (= n 0) 'ok (f (- n 1))))))
(f 200000)

;;; closure-loop-counter-fresh
(define (make-list-of-closures n) (let loop ((i 0) (acc '())) (if (= i n) acc (loop (+ i 1) (cons (lambda () i) acc)))))
(map (lambda (f) (f)) (make-list-of-closures 5))

;;; letrec-star-closure-refers-later
(letrec* ((f (lambda () (g))) (g (lambda () 'g-result))) (f))

;;; internal-defines-in-named-let
(let loop ((i 0))
  (define (sq x) (* x x))
  (if (= i 3) (sq i) (loop (+ i 1))))

;;; nested-named-lets-same-name
(let loop ((i 0) (acc 0))
  (if (= i 3) acc
      (loop (+ i 1) (+ acc (let loop ((j 0) (s 0)) (if (= j i) s (loop (+ j 1) (+ s j))))))))

;;; tail-call-through-apply-as-value
(define ap apply)
(define (count n) (if (= n 0) 'finished (ap count (list (- n 1)))))
(count 100000)

;;; tail-call-through-apply-apply
(define (count n) (if (= n 0) 'finished (apply apply (list count (list (- n 1))))))
(count 100000)

;;; recursion-non-tail-depth-20000
(define (sum n) (if (= n 0) 0 (+ n (sum (- n 1)))))
(sum 20000)

;;; recursion-non-tail-build-list-30000
(define (build n) (if (= n 0) '() (cons n (build (- n 1)))))
(length (build 30000))
