;;; A meta-circular evaluator for the NDVM language, written in the NDVM language.
;;;
;;; (mc-run program bindings) evaluates PROGRAM, a list of top-level forms given as quoted data,
;;; in a global environment made of BINDINGS (an association list from the program's parameter
;;; and input names to the host's values) in front of the primitive procedures. Because the
;;; numbers the interpreted program computes with are the host's own numbers, gradients flow
;;; through the interpreter into the host's parameters.
;;;
;;; The host language has no mutation, so the evaluator uses none:
;;; - an environment is a list of frames; a frame is a pair (values . procedures):
;;;     values      an association list (name . value)
;;;     procedures  an association list (name . (params . body)) for the lambdas of a letrec, a
;;;                 named let or a body's definitions. Looking one up makes a closure over the
;;;                 environment that starts at its own frame, so the procedure sees itself and
;;;                 its siblings: recursion is tied by construction, never by assignment.
;;; - an interpreted procedure is a host procedure (a closure over the interpreted body and
;;;   environment), so interpreted and primitive procedures are applied alike with `apply`, and
;;;   host primitives that take procedures (map, apply) accept interpreted ones.
;;; - every evaluation in tail position (if, cond, case, and, or, when, unless, the last form of
;;;   a body, the operator call of an application) is a tail call of the host, so the
;;;   interpreted program's tail calls do not grow the host's stack.
;;;
;;; All names here start with `mc-` so that the host program's parameter and input names,
;;; which sit beside them at the host's top level, cannot collide with them.

;;; ---------------------------------------------------------------------------------------
;;; Errors of the interpreted program: a kind (a symbol) and the offending datum.

(define (mc-fail kind irritant) (error kind irritant))

;;; ---------------------------------------------------------------------------------------
;;; Environments

(define (mc-empty-frame) (cons '() '()))

(define (mc-value-frame bindings) (cons bindings '()))

;; A new environment whose first frame also binds NAME to VALUE (the frame is rebuilt, never
;; changed: closures made before keep the frame they saw).
(define (mc-frame-add env name value)
  (let ((frame (car env)))
    (cons (cons (cons (cons name value) (car frame)) (cdr frame)) (cdr env))))

(define (mc-lookup name env)
  (if (null? env)
      (mc-fail 'unbound-variable name)
      (let ((value (assq name (car (car env)))))
        (if value
            (cdr value)
            (let ((procedure (assq name (cdr (car env)))))
              (if procedure
                  (mc-make-procedure (car (cdr procedure)) (cdr (cdr procedure)) env)
                  (mc-lookup name (cdr env))))))))

(define (mc-bound? name env)
  (cond ((null? env) #f)
        ((assq name (car (car env))) #t)
        ((assq name (cdr (car env))) #t)
        (else (mc-bound? name (cdr env)))))

;; The association list binding the formal PARAMS (a proper list, an improper list with a
;; rest parameter, or a single rest symbol) to the actual ARGS.
(define (mc-bind params args)
  (cond ((null? params)
         (if (null? args) '() (mc-fail 'too-many-arguments args)))
        ((symbol? params) (list (cons params args)))
        ((null? args) (mc-fail 'too-few-arguments params))
        (else (cons (cons (car params) (car args)) (mc-bind (cdr params) (cdr args))))))

;;; ---------------------------------------------------------------------------------------
;;; Procedures and application

(define (mc-make-procedure params body env)
  (lambda args (mc-eval-body body (cons (mc-value-frame (mc-bind params args)) env))))

(define (mc-apply procedure args)
  (if (procedure? procedure)
      (apply procedure args)
      (mc-fail 'not-a-procedure procedure)))

;; The values of the expressions XS, evaluated left to right.
(define (mc-eval-list xs env)
  (if (null? xs)
      '()
      (let ((first (mc-eval (car xs) env)))
        (cons first (mc-eval-list (cdr xs) env)))))

;;; ---------------------------------------------------------------------------------------
;;; The evaluator

(define (mc-eval x env)
  (cond ((symbol? x) (mc-lookup x env))
        ((pair? x)
         (let ((special (if (symbol? (car x)) (assq (car x) mc-special-forms) #f)))
           (if special
               ((cdr special) x env)
               (mc-apply (mc-eval (car x) env) (mc-eval-list (cdr x) env)))))
        ((null? x) (mc-fail 'empty-application x))
        (else x)))

;; A sequence of expressions (begin, a cond clause): all but the last for their errors, the
;; last in tail position.
(define (mc-eval-sequence forms env)
  (cond ((null? forms) (mc-fail 'empty-sequence forms))
        ((null? (cdr forms)) (mc-eval (car forms) env))
        (else (mc-eval (car forms) env) (mc-eval-sequence (cdr forms) env))))

;;; ---------------------------------------------------------------------------------------
;;; Bodies and definitions
;;;
;;; A body (of a lambda, a let, the program itself) may start with or interleave definitions.
;;; All the procedure definitions of a body go into one frame's procedures up front, so they
;;; can call each other in any order; value definitions are evaluated in order and added to
;;; that frame's values, so later forms see them (letrec* semantics).

(define (mc-definition? form)
  (if (pair? form) (eq? (car form) 'define) #f))

;; (param name init ...) at the top level: the host has already bound NAME.
(define (mc-declaration? form)
  (if (pair? form) (eq? (car form) 'param) #f))

;; (define (f . params) body ...) or (define f (lambda params body ...))
(define (mc-procedure-definition? form)
  (if (mc-definition? form)
      (if (pair? (cdr form))
          (if (pair? (car (cdr form)))
              #t
              (if (pair? (cdr (cdr form)))
                  (let ((value (car (cdr (cdr form)))))
                    (if (pair? value) (eq? (car value) 'lambda) #f))
                  #f))
          #f)
      #f))

;; (name . (params . body)) of a procedure definition
(define (mc-procedure-entry form)
  (let ((target (car (cdr form))))
    (if (pair? target)
        (cons (car target) (cons (cdr target) (cdr (cdr form))))
        (cons target (cdr (car (cdr (cdr form))))))))

(define (mc-procedure-entries forms)
  (cond ((null? forms) '())
        ((mc-procedure-definition? (car forms))
         (cons (mc-procedure-entry (car forms)) (mc-procedure-entries (cdr forms))))
        (else (mc-procedure-entries (cdr forms)))))

(define (mc-begin? form)
  (if (pair? form) (eq? (car form) 'begin) #f))

;; Whether FORMS define anything, also inside a (begin ...) among them (it splices).
(define (mc-has-definitions? forms)
  (cond ((null? forms) #f)
        ((mc-definition? (car forms)) #t)
        ((mc-declaration? (car forms)) #t)
        ((mc-begin? (car forms))
         (if (mc-has-definitions? (cdr (car forms))) #t (mc-has-definitions? (cdr forms))))
        (else (mc-has-definitions? (cdr forms)))))

;; FORMS with each (begin form ...) among them replaced by its forms.
(define (mc-splice-begins forms)
  (cond ((null? forms) '())
        ((mc-begin? (car forms))
         (append (mc-splice-begins (cdr (car forms))) (mc-splice-begins (cdr forms))))
        (else (cons (car forms) (mc-splice-begins (cdr forms))))))

(define (mc-eval-body body env)
  (if (mc-has-definitions? body)
      (let ((forms (mc-splice-begins body)))
        (mc-eval-body-forms forms (cons (cons '() (mc-procedure-entries forms)) env)))
      (mc-eval-sequence body env)))

;; ENV's first frame is the body's own frame.
(define (mc-eval-body-forms forms env)
  (if (null? forms)
      (mc-fail 'body-without-expression forms)
      (let ((form (car forms)) (rest (cdr forms)))
        (cond ((mc-definition? form)
               (if (mc-procedure-definition? form)
                   (mc-eval-body-forms rest env)
                   (mc-eval-body-forms rest (mc-define-value form env))))
              ((mc-declaration? form) (mc-eval-body-forms rest env))
              ((null? rest) (mc-eval form env))
              (else (mc-eval form env) (mc-eval-body-forms rest env))))))

;; (define name expression): ENV with NAME bound in its first frame
(define (mc-define-value form env)
  (if (if (pair? (cdr form)) (if (symbol? (car (cdr form))) (pair? (cdr (cdr form))) #f) #f)
      (mc-frame-add env (car (cdr form)) (mc-eval (car (cdr (cdr form))) env))
      (mc-fail 'bad-definition form)))

;; Binds the definitions FORMS (procedures already in ENV's first frame) and returns the env.
(define (mc-define-values forms env)
  (cond ((null? forms) env)
        ((mc-procedure-definition? (car forms)) (mc-define-values (cdr forms) env))
        (else (mc-define-values (cdr forms) (mc-define-value (car forms) env)))))

;;; ---------------------------------------------------------------------------------------
;;; Special forms: each takes the whole form and the environment.

(define (mc-eval-quote x env) (car (cdr x)))

(define (mc-eval-if x env)
  (if (mc-eval (car (cdr x)) env)
      (mc-eval (car (cdr (cdr x))) env)
      (if (null? (cdr (cdr (cdr x))))
          #f
          (mc-eval (car (cdr (cdr (cdr x)))) env))))

(define (mc-eval-cond x env) (mc-eval-clauses (cdr x) env))

(define (mc-eval-clauses clauses env)
  (if (null? clauses)
      #f
      (let ((clause (car clauses)))
        (if (eq? (car clause) 'else)
            (mc-eval-sequence (cdr clause) env)
            (let ((test (mc-eval (car clause) env)))
              (cond ((not test) (mc-eval-clauses (cdr clauses) env))
                    ((null? (cdr clause)) test)
                    ((eq? (car (cdr clause)) '=>)
                     (mc-apply (mc-eval (car (cdr (cdr clause))) env) (list test)))
                    (else (mc-eval-sequence (cdr clause) env))))))))

(define (mc-eval-case x env)
  (mc-case-clauses (mc-eval (car (cdr x)) env) (cdr (cdr x)) env))

(define (mc-case-clauses key clauses env)
  (cond ((null? clauses) #f)
        ((eq? (car (car clauses)) 'else) (mc-eval-sequence (cdr (car clauses)) env))
        ((memv key (car (car clauses))) (mc-eval-sequence (cdr (car clauses)) env))
        (else (mc-case-clauses key (cdr clauses) env))))

(define (mc-eval-and x env)
  (if (null? (cdr x)) #t (mc-and-forms (cdr x) env)))

(define (mc-and-forms forms env)
  (if (null? (cdr forms))
      (mc-eval (car forms) env)
      (if (mc-eval (car forms) env) (mc-and-forms (cdr forms) env) #f)))

(define (mc-eval-or x env)
  (if (null? (cdr x)) #f (mc-or-forms (cdr x) env)))

(define (mc-or-forms forms env)
  (if (null? (cdr forms))
      (mc-eval (car forms) env)
      (let ((value (mc-eval (car forms) env)))
        (if value value (mc-or-forms (cdr forms) env)))))

(define (mc-eval-when x env)
  (if (mc-eval (car (cdr x)) env) (mc-eval-sequence (cdr (cdr x)) env) #f))

(define (mc-eval-unless x env)
  (if (mc-eval (car (cdr x)) env) #f (mc-eval-sequence (cdr (cdr x)) env)))

(define (mc-eval-begin x env) (mc-eval-sequence (cdr x) env))

(define (mc-eval-lambda x env) (mc-make-procedure (car (cdr x)) (cdr (cdr x)) env))

;; The values of the bindings ((name init) ...), each init evaluated in ENV, left to right.
(define (mc-eval-bindings bindings env)
  (if (null? bindings)
      '()
      (let ((first (cons (car (car bindings)) (mc-eval (car (cdr (car bindings))) env))))
        (cons first (mc-eval-bindings (cdr bindings) env)))))

(define (mc-eval-let x env)
  (if (symbol? (car (cdr x)))
      (mc-named-let (car (cdr x)) (car (cdr (cdr x))) (cdr (cdr (cdr x))) env)
      (mc-eval-body (cdr (cdr x)) (cons (mc-value-frame (mc-eval-bindings (car (cdr x)) env)) env))))

;; (let name ((var init) ...) body ...): NAME is a procedure of its own frame; the inits are
;; evaluated in the outer environment.
(define (mc-named-let name bindings body env)
  (let ((loop-env (cons (cons '() (list (cons name (cons (map car bindings) body)))) env)))
    (mc-apply (mc-lookup name loop-env) (mc-eval-list (map mc-binding-init bindings) env))))

(define (mc-binding-init binding) (car (cdr binding)))

(define (mc-eval-let* x env)
  (mc-let*-bindings (car (cdr x)) (cdr (cdr x)) (cons (mc-empty-frame) env)))

(define (mc-let*-bindings bindings body env)
  (if (null? bindings)
      (mc-eval-body body env)
      (mc-let*-bindings (cdr bindings) body
                        (mc-frame-add env (car (car bindings))
                                      (mc-eval (car (cdr (car bindings))) env)))))

;; letrec and letrec*: the bindings are definitions of one frame, the body a new scope.
(define (mc-eval-letrec x env)
  (let ((definitions (map mc-binding-definition (car (cdr x)))))
    (mc-eval-body (cdr (cdr x))
                  (mc-define-values definitions
                                    (cons (cons '() (mc-procedure-entries definitions)) env)))))

(define (mc-binding-definition binding) (cons 'define binding))

;; (loop ((var init) ...) body ...) with (recur e ...) in tail position is a named let whose
;; name is recur. A program may also name its own procedure `loop` (a named let's name very
;; often is): where `loop` is bound, (loop ...) is a call.
(define (mc-eval-loop x env)
  (if (mc-bound? 'loop env)
      (mc-apply (mc-lookup 'loop env) (mc-eval-list (cdr x) env))
      (mc-named-let 'recur (car (cdr x)) (cdr (cdr x)) env)))

;; (do ((var init step) ...) (test result ...) body ...): the body's values are unused (the
;; language has no effects), so each step rebinds the variables to their steps.
(define (mc-eval-do x env)
  (mc-do-step (car (cdr x)) (car (cdr (cdr x)))
              (cons (mc-value-frame (mc-eval-bindings (car (cdr x)) env)) env)
              env))

(define (mc-do-step specs exit loop-env outer-env)
  (if (mc-eval (car exit) loop-env)
      (if (null? (cdr exit)) #f (mc-eval-sequence (cdr exit) loop-env))
      (mc-do-step specs exit
                  (cons (mc-value-frame (mc-do-next specs loop-env)) outer-env)
                  outer-env)))

(define (mc-do-next specs env)
  (if (null? specs)
      '()
      (let ((spec (car specs)))
        (let ((first (cons (car spec)
                           (if (null? (cdr (cdr spec)))
                               (mc-lookup (car spec) env)
                               (mc-eval (car (cdr (cdr spec))) env)))))
          (cons first (mc-do-next (cdr specs) env))))))

(define (mc-eval-define x env) (mc-fail 'definition-in-expression-context x))

(define (mc-eval-param x env) (mc-fail 'param-declaration-not-at-top-level x))

(define mc-special-forms
  (list (cons 'if mc-eval-if)
        (cons 'quote mc-eval-quote)
        (cons 'let mc-eval-let)
        (cons 'cond mc-eval-cond)
        (cons 'lambda mc-eval-lambda)
        (cons 'let* mc-eval-let*)
        (cons 'and mc-eval-and)
        (cons 'or mc-eval-or)
        (cons 'begin mc-eval-begin)
        (cons 'letrec mc-eval-letrec)
        (cons 'letrec* mc-eval-letrec)
        (cons 'when mc-eval-when)
        (cons 'unless mc-eval-unless)
        (cons 'case mc-eval-case)
        (cons 'do mc-eval-do)
        (cons 'loop mc-eval-loop)
        (cons 'define mc-eval-define)
        (cons 'param mc-eval-param)))

;;; ---------------------------------------------------------------------------------------
;;; Primitive procedures: the host's own, so their values and gradients are the host's.

(define mc-primitives
  (list (cons '+ +) (cons '- -) (cons '* *) (cons '/ /)
        (cons '= =) (cons '< <) (cons '> >) (cons '<= <=) (cons '>= >=)
        (cons 'min min) (cons 'max max)
        (cons 'abs abs) (cons 'floor floor) (cons 'ceiling ceiling) (cons 'round round)
        (cons 'truncate truncate)
        (cons 'exp exp) (cons 'log log) (cons 'sqrt sqrt) (cons 'sin sin) (cons 'cos cos)
        (cons 'tan tan) (cons 'asin asin) (cons 'acos acos) (cons 'atan atan) (cons 'tanh tanh)
        (cons 'square square) (cons 'sigmoid sigmoid) (cons 'logistic logistic)
        (cons 'softplus softplus)
        (cons 'expt expt) (cons 'quotient quotient) (cons 'remainder remainder)
        (cons 'modulo modulo)
        (cons 'exact->inexact exact->inexact) (cons 'inexact inexact)
        (cons 'inexact->exact inexact->exact) (cons 'exact exact)
        (cons 'zero? zero?) (cons 'positive? positive?) (cons 'negative? negative?)
        (cons 'even? even?) (cons 'odd? odd?) (cons 'number? number?) (cons 'integer? integer?)
        (cons 'exact? exact?) (cons 'inexact? inexact?)
        (cons 'boolean? boolean?) (cons 'symbol? symbol?) (cons 'procedure? procedure?)
        (cons 'null? null?) (cons 'pair? pair?) (cons 'list? list?)
        (cons 'not not) (cons 'eq? eq?) (cons 'eqv? eqv?) (cons 'equal? equal?)
        (cons 'cons cons) (cons 'car car) (cons 'cdr cdr)
        (cons 'caar caar) (cons 'cadr cadr) (cons 'cdar cdar) (cons 'cddr cddr)
        (cons 'caddr caddr) (cons 'cdddr cdddr) (cons 'cadddr cadddr)
        (cons 'list list) (cons 'length length) (cons 'list-ref list-ref)
        (cons 'list-tail list-tail) (cons 'append append) (cons 'reverse reverse)
        (cons 'map map) (cons 'for-each for-each) (cons 'filter filter)
        (cons 'fold-left fold-left) (cons 'fold-right fold-right) (cons 'reduce reduce)
        (cons 'apply apply)
        (cons 'assq assq) (cons 'assv assv) (cons 'assoc assoc)
        (cons 'memq memq) (cons 'memv memv) (cons 'member member)
        (cons 'error error)
        (cons 'vec vec) (cons 'mat mat) (cons 'ref ref)
        (cons 'dot dot) (cons 'outer outer) (cons 'matvec matvec) (cons 'matmul matmul)
        (cons 'transpose transpose) (cons 'trace trace)
        (cons 'eye eye) (cons 'zeros zeros) (cons 'ones ones)
        (cons 'vsum vsum) (cons 'norm norm) (cons 'inv inv) (cons 'solve solve)
        (cons 'det det) (cons 'logdet logdet) (cons 'cholesky cholesky)
        (cons 'rows rows) (cons 'cols cols) (cons 'size size)
        (cons 'vec->list vec->list) (cons 'list->vec list->vec)))

;;; ---------------------------------------------------------------------------------------
;;; Entry point

;; The value of PROGRAM (a list of top-level forms) with BINDINGS (name . value) for its
;; parameters and inputs.
(define (mc-run program bindings)
  (mc-eval-body program (list (mc-value-frame bindings) (mc-value-frame mc-primitives))))
