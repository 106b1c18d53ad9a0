; Conformance programs: lists, pairs, symbols, equivalence predicates and type predicates.

;;; list-cons-onto-list
(cons 1 '(2 3))

;;; list-cons-dotted
(cons 1 2)

;;; list-car-cdr
(list (car '(1 2 3)) (cdr '(1 2 3)))

;;; list-cadr-cddr-caddr-cdddr
(define l '(1 2 3 4 5))
(list (cadr l) (cddr l) (caddr l) (cdddr l))

;;; list-constructor
(list 1 (+ 1 1) 'three (list 4))

;;; list-empty-constructor
(list)

;;; list-length
(list (length '()) (length '(1)) (length '(1 (2 3) 4)))

;;; list-ref
(list (list-ref '(a b c d) 0) (list-ref '(a b c d) 3))

;;; list-tail
(list (list-tail '(1 2 3 4) 0) (list-tail '(1 2 3 4) 2) (list-tail '(1 2 3 4) 4))

;;; list-append-two
(append '(1 2) '(3 4))

;;; list-append-many
(append '(1) '() '(2 3) '(4))

;;; list-append-none
(append)

;;; list-append-one
(append '(1 2))

;;; list-append-improper-tail
(append '(1 2) 3)

;;; list-append-empty-then-atom
(append '() 'z)

;;; list-reverse
(reverse '(1 (2 3) 4))

;;; list-reverse-empty
(reverse '())

;;; list-memq-found
(memq 'c '(a b c d))

;;; list-memq-missing
(memq 'z '(a b c))

;;; list-memv-numbers
(list (memv 3 '(1 2 3 4)) (memv 3.0 '(1 2 3 4)) (memv 2.5 '(1 2.5 3)))

;;; list-member-nested
(member '(2 3) '(1 (2 3) 4))

;;; list-member-numbers-equal
(member 2.0 '(1 2 3))

;;; list-assq
(cdr (assq 'b '((a . 1) (b . 2) (c . 3))))

;;; list-assq-returns-pair
(assq 'c '((a 1) (b 2) (c 3)))

;;; list-assq-missing
(assq 'z '((a . 1)))

;;; list-assv-numbers
(assv 2 '((1 . one) (2 . two) (3 . three)))

;;; list-assoc-list-key
(assoc '(1 2) '(((1 2) . found) ((3) . other)))

;;; list-assoc-exactness
(list (assoc 2.0 '((1 . a) (2 . b))) (assoc 2 '((1 . a) (2 . b))))

;;; list-nested-structure
(define tree (list 1 (list 2 (list 3 (list 4)))))
(car (cadr (cadr (cadr tree))))

;;; list-build-with-cons-dotted-chain
(cons 1 (cons 2 (cons 3 4)))

;;; list-of-pairs
(list (cons 'a 1) (cons 'b 2))

;;; list-improper-cdr
(cdr '(1 . 2))

;;; list-length-of-mapped
(length (map (lambda (x) (list x x)) '(1 2 3 4 5)))

;;; list-zip
(define (zip a b) (if (or (null? a) (null? b)) '() (cons (cons (car a) (car b)) (zip (cdr a) (cdr b)))))
(zip '(1 2 3) '(x y z))

;;; list-iota-sum
(define (iota n) (let loop ((i (- n 1)) (acc '())) (if (< i 0) acc (loop (- i 1) (cons i acc)))))
(apply + (iota 101))

;;; list-last-pair
(define (last-pair l) (if (null? (cdr l)) l (last-pair (cdr l))))
(last-pair '(1 2 3))

;;; list-list-copy-equal
(define (copy l) (if (pair? l) (cons (car l) (copy (cdr l))) l))
(equal? (copy '(1 (2 . 3) 4)) '(1 (2 . 3) 4))

;;; list-predicates
(list (null? '()) (null? '(1)) (pair? '()) (pair? '(1)) (pair? (cons 1 2)) (list? '(1 2)) (list? (cons 1 2)) (list? '()))

;;; list-predicate-null-of-number
(list (null? 0) (pair? 0) (list? 0))

;;; symbols-eq
(list (eq? 'a 'a) (eq? 'a 'b))

;;; symbols-case-sensitive
(eq? 'abc 'ABC)

;;; symbols-with-punctuation
(list 'a->b 'set-car! 'x? 'hello-world '<=> '+x)

;;; symbols-predicate
(list (symbol? 'a) (symbol? '()) (symbol? 1) (symbol? (car '(x))))

;;; symbols-from-data
(define (lookup key table) (let ((hit (assq key table))) (if hit (cdr hit) 'missing)))
(list (lookup 'b '((a . 1) (b . 2))) (lookup 'z '((a . 1))))

;;; eq-empty-list
(eq? '() '())

;;; eq-booleans
(list (eq? #t #t) (eq? #f #f) (eq? #t #f))

;;; eq-fresh-lists
(eq? (list 1) (list 1))

;;; eq-same-object
(define p (list 1 2))
(eq? p p)

;;; eqv-numbers
(list (eqv? 2 2) (eqv? 2.0 2.0) (eqv? 2 2.0) (eqv? 100000000 100000000))

;;; eqv-fresh-pairs
(eqv? (cons 1 2) (cons 1 2))

;;; equal-lists
(list (equal? (list 1 2 (list 3)) (list 1 2 (list 3))) (equal? '(1 2) '(1 3)) (equal? '() '()))

;;; equal-numbers-exactness
(list (equal? 2 2) (equal? 2 2.0) (equal? 1.5 1.5))

;;; equal-dotted
(equal? (cons 1 2) (cons 1 2))

;;; equal-symbols-deep
(equal? '(a (b c) d) (list 'a (list 'b 'c) 'd))

;;; predicate-number
(list (number? 1) (number? 1.5) (number? 'a) (number? '()) (number? #t))

;;; predicate-boolean
(list (boolean? #t) (boolean? #f) (boolean? 0) (boolean? '()))

;;; predicate-procedure
(list (procedure? car) (procedure? (lambda (x) x)) (procedure? 'car) (procedure? '(1)))

;;; predicate-not
(list (not #f) (not #t) (not 0) (not '()) (not 'a))

;;; data-association-counter
(define (count-symbols lst)
  (let loop ((l lst) (acc '()))
    (if (null? l) acc
        (let ((hit (assq (car l) acc)))
          (loop (cdr l)
                (if hit
                    (map (lambda (p) (if (eq? (car p) (car l)) (cons (car p) (+ (cdr p) 1)) p)) acc)
                    (cons (cons (car l) 1) acc)))))))
(count-symbols '(a b a c b a))

;;; data-stack-machine
(define (run prog stack)
  (if (null? prog) (car stack)
      (let ((op (car prog)))
        (cond ((number? op) (run (cdr prog) (cons op stack)))
              ((eq? op 'add) (run (cdr prog) (cons (+ (cadr stack) (car stack)) (cddr stack))))
              ((eq? op 'mul) (run (cdr prog) (cons (* (cadr stack) (car stack)) (cddr stack))))
              ((eq? op 'sub) (run (cdr prog) (cons (- (cadr stack) (car stack)) (cddr stack))))
              (else 'error)))))
(run '(2 3 add 4 mul 5 sub) '())

;;; data-matrix-as-lists
(define (transpose m) (if (null? (car m)) '() (cons (map car m) (transpose (map cdr m)))))
(define (dot a b) (apply + (map * a b)))
(define (mat* a b) (let ((bt (transpose b))) (map (lambda (row) (map (lambda (col) (dot row col)) bt)) a)))
(mat* '((1 2) (3 4)) '((5 6) (7 8)))

;;; data-symbolic-derivative
(define (deriv e v)
  (cond ((number? e) 0)
        ((symbol? e) (if (eq? e v) 1 0))
        ((eq? (car e) '+) (list '+ (deriv (cadr e) v) (deriv (caddr e) v)))
        ((eq? (car e) '*) (list '+ (list '* (cadr e) (deriv (caddr e) v))
                                   (list '* (deriv (cadr e) v) (caddr e))))
        (else 'unknown)))
(deriv '(+ (* x x) (* 3 x)) 'x)

;;; data-list-index
(define (index-of x lst)
  (let loop ((l lst) (i 0))
    (cond ((null? l) #f) ((equal? (car l) x) i) (else (loop (cdr l) (+ i 1))))))
(list (index-of 'c '(a b c)) (index-of 'q '(a b c)))

;;; data-remove-duplicates
(define (dedupe lst)
  (cond ((null? lst) '())
        ((member (car lst) (cdr lst)) (dedupe (cdr lst)))
        (else (cons (car lst) (dedupe (cdr lst))))))
(dedupe '(1 2 1 3 2 4))

;;; data-list-tail-sharing
(define l (list 1 2 3 4))
(eq? (list-tail l 2) (cddr l))

;;; data-memq-tail-sharing
(define l (list 'a 'b 'c))
(eq? (memq 'b l) (cdr l))

;;; list-apply-list-with-leading
(apply list 1 2 '(3))

;;; list-map-cons-pairs
(map cons '(1 2) '(3 4))

;;; list-append-deep-many
(define (rep n x) (if (= n 0) '() (cons x (rep (- n 1) x))))
(length (apply append (map (lambda (k) (rep k k)) '(1 2 3 4 5 6 7 8 9 10))))

;;; list-eqv-empty
(list (eqv? '() '()) (equal? 1.0 1.0) (eqv? 'a 'a))

;;; equal-nested-exactness
(list (equal? '(1 (2)) '(1 (2.0))) (equal? '(1 (2)) '(1 (2))))

;;; list-append-shares-last
(let ((tail (list 3 4))) (eq? (cddr (append '(1 2) tail)) tail))

;;; list-reverse-does-not-share
(let ((l (list 1 2))) (eq? l (reverse (reverse l))))

;;; list-cadr-of-dotted
(cadr '(1 2 . 3))

;;; list-cddr-improper
(cddr '(1 2 . 3))

;;; list-list?-long
(list? (let loop ((i 0) (acc '())) (if (= i 10000) acc (loop (+ i 1) (cons i acc)))))

;;; list-nested-quote-in-list
(length '(a 'b c))

;;; list-quoted-quote-structure
(car (cadr '(a 'b)))

;;; list-not-of-empty-list
(not '())

;;; list-if-with-empty-list-test
(if '() 'truthy 'falsy)

;;; list-assq-on-empty
(assq 'a '())

;;; list-member-on-empty
(member 1 '())

;;; eqv-signed-zero
(list (eqv? 0.0 -0.0) (if (memv 0.0 (list (* -1.0 0.0) 1)) #t #f) (= 0.0 -0.0))
